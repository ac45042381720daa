"""The second factor of staff sign-in (docs/design.md §11): TOTP from an authenticator app,
recovery codes, and the one-time enrolment code a supervisor's reset hands out.

Devices are django-otp's, one purpose each, told apart by name:

- ``authenticator``: a ``TOTPDevice``; unconfirmed while its owner is enrolling, so the
  QR code stays the same across reloads until a code from the app confirms it.
- ``recovery``: a ``StaticDevice`` of ten single-use codes, issued at enrolment.
- ``enrolment``: a ``StaticDevice`` with one single-use code, issued by a supervisor's
  reset. It lets its owner sign in once, and only to enrol a new authenticator.

Supervisors and auditors must pass a second factor when ``STAFF_MFA_REQUIRED`` (on
unless debug); anyone who has enrolled must use theirs. Every change here is an audit
event on the person's ``STAFF#`` stream, written in the same database transaction as the
change (the event first: a change the audit trail refused does not happen).
"""

from __future__ import annotations

import logging
import secrets
from base64 import b32encode
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import segno
from django.conf import settings
from django.contrib.auth import logout
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from dashboard.accounts import lockout
from dashboard.accounts.account_changes import OwnerNotice, account_change
from dashboard.accounts.events import account_event_append
from dashboard.auth import UNGATED_PATHS, to_sign_in, user_role
from reconciliation.actors import Actor, Role
from reconciliation.audit.models import AuditAction, AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User

AUTHENTICATOR = "authenticator"
RECOVERY = "recovery"
ENROLMENT = "enrolment"
RECOVERY_CODE_COUNT = 10
MFA_ROLES = frozenset({Role.SUPERVISOR, Role.AUDITOR})

logger = logging.getLogger(__name__)


class SecondFactorRefused(Exception):
    """A code was refused; the message says why in words a person can act on."""


@dataclass(frozen=True)
class SecondFactorStatus:
    required: bool
    enrolled: bool  # an authenticator app
    enrolment_code_open: bool
    recovery_codes_left: int
    passkeys: int = 0

    @property
    def has_second_factor(self) -> bool:
        """An authenticator or a passkey: what a supervisor's reset would take away (an
        account with neither has nothing to reset)."""
        return self.enrolled or self.passkeys > 0

    @property
    def label(self) -> str:
        keys = f"{self.passkeys} passkey{pluralize(self.passkeys)}" if self.passkeys else ""
        if self.enrolled:
            return "Authenticator app" + (f" and {keys}" if keys else "")
        if keys:
            return keys[0].upper() + keys[1:]
        if self.enrolment_code_open:
            return "Enrolment code issued"
        return "Not enrolled"


# --- policy ------------------------------------------------------------------------------


def mfa_required(user: User) -> bool:
    """Whether ``user`` must pass a second factor at sign-in: supervisors, auditors and
    superusers (who reach the administration screen, /admin/)."""
    if not settings.STAFF_MFA_REQUIRED:
        return False
    return user_role(user) in MFA_ROLES or bool(
        getattr(user, "is_superuser", False) and user.is_active
    )


def has_any_device(user: User) -> bool:
    return (
        _confirmed(TOTPDevice, user).exists()
        or StaticToken.objects.filter(device__user=user, device__confirmed=True).exists()
        or _confirmed(WebAuthnCredential, user).exists()
    )


def authenticator(user: User) -> TOTPDevice | None:
    return _confirmed(TOTPDevice, user).first()


def needs_enrolment(request: HttpRequest) -> bool:
    """Signed in as a role that requires an authenticator, without one (first sign-in
    with a supervisor's enrolment code, or an account older than the requirement)."""
    user = request.user
    if not user.is_authenticated or not mfa_required(user):
        return False
    if isinstance(getattr(user, "otp_device", None), TOTPDevice):
        return False  # verified by the authenticator this session: no query
    return authenticator(user) is None


def status(user: User) -> SecondFactorStatus:
    recovery = _confirmed(StaticDevice, user).filter(name=RECOVERY).first()
    return SecondFactorStatus(
        required=mfa_required(user),
        enrolled=authenticator(user) is not None,
        enrolment_code_open=_confirmed(StaticDevice, user)
        .filter(name=ENROLMENT, token_set__isnull=False)
        .exists(),
        recovery_codes_left=recovery.token_set.count() if recovery else 0,
        passkeys=_confirmed(WebAuthnCredential, user).count(),
    )


# --- sign-in -----------------------------------------------------------------------------


def device_for_token(user: User, token: str) -> Device | None:
    """The confirmed device of ``user`` that accepts ``token`` (consuming it), or None.

    Six digits are tried against the authenticator, anything else against the single-use
    codes, so a typo never spends an attempt of the other kind. django-otp throttles
    each device after a failure (1 s, 2 s, 4 s… until a success): a guessed code is
    refused while throttled, with a message that says so.
    """
    code = normalise(token)
    if not code:
        return None
    if code.isdigit() and len(code) == 6:
        devices: list[Device] = list(_confirmed(TOTPDevice, user))
    else:
        devices = list(_confirmed(StaticDevice, user))
    for device in devices:
        if _verify(device, code):
            return device
    return None


def _verify(device: Device, code: str) -> bool:
    """``device.verify_token``, but a throttled device says so instead of "wrong code"."""
    allowed, extra = device.verify_is_allowed()
    if not allowed:
        wait = extra.get("locked_until")
        raise SecondFactorRefused(
            "Too many wrong codes: wait a little and try again"
            + (f" after {wait:%H:%M:%S} UTC." if wait else ".")
        )
    return bool(device.verify_token(code))


def normalise(token: str) -> str:
    """Codes as people type them: spaces and dashes dropped, letters lower-cased."""
    return "".join(ch for ch in (token or "") if ch not in " -\t").lower()


# --- enrolment ---------------------------------------------------------------------------


def pending_authenticator(user: User) -> TOTPDevice:
    """The unconfirmed authenticator being enrolled (created on first call)."""
    device = TOTPDevice.objects.filter(user=user, name=AUTHENTICATOR, confirmed=False).first()
    return device or TOTPDevice.objects.create(user=user, name=AUTHENTICATOR, confirmed=False)


def qr_svg(uri: str) -> str:
    """The ``otpauth://`` URI as an inline SVG QR code (no image request, CSP-clean)."""
    return segno.make(uri, error="m").svg_inline(scale=4, dark="#111", light="#fff")


def secret_text(device: TOTPDevice) -> str:
    """The key as an authenticator app takes it typed in: base32, in groups of four."""
    text = b32encode(device.bin_key).decode()
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def authenticator_confirm(user: User, token: str, *, actor: Actor) -> tuple[TOTPDevice, list[str]]:
    """Confirm the pending authenticator with a code from the app; it replaces any
    earlier one, the enrolment code is spent, and fresh recovery codes are returned
    (shown once) with the device. Raises :class:`SecondFactorRefused` on a wrong code."""
    device = pending_authenticator(user)
    if not _verify(device, normalise(token)):
        raise SecondFactorRefused(
            "That code does not match: check the app shows this account, and that the "
            "phone's clock is set automatically."
        )
    with transaction.atomic():
        replaced = _confirmed(TOTPDevice, user).exists()
        account_event_append(
            user,
            AuditEvent(
                action=AuditAction.MFA_ENROLLED,
                actor=actor,
                detail={"replaced_earlier_authenticator": replaced},
            ),
        )
        _confirmed(TOTPDevice, user).delete()
        StaticDevice.objects.filter(user=user, name=ENROLMENT).delete()
        device.confirmed = True
        device.save(update_fields=["confirmed"])
        return device, _recovery_codes_replace(user)


REPLACE_REFUSED = (
    "The password or the code from your current authenticator (or recovery code) is not "
    "right: nothing was changed."
)


def authenticator_replace(
    user: User,
    *,
    password: str,
    current_token: str,
    new_token: str,
    actor: Actor,
    keep_session: str | None,
) -> tuple[TOTPDevice, list[str], int]:
    """Replace an enrolled authenticator with the pending one. A session alone is not
    enough (it may be stolen): the password and a code from a current device (the app,
    or a recovery code) prove the owner, then the new app's code proves the new device.
    The attempt is counted by the sign-in lockout first (dashboard/accounts/lockout.py), so the
    form cannot be used to guess the password. Every other session of the account ends,
    and the event records neither the password nor any code.

    Returns the device, fresh recovery codes, and how many other sessions were ended.
    Raises :class:`SecondFactorRefused`, having changed nothing."""
    proof = owner_confirm(
        user, password=password, current_token=current_token, address=actor.address or None
    )
    device = pending_authenticator(user)
    if not _verify(device, normalise(new_token)):
        raise SecondFactorRefused(
            "That code does not match the new app: check the app shows this account, and "
            "that the phone's clock is set automatically."
        )
    with account_change(
        user,
        AuditEvent(
            action=AuditAction.MFA_REPLACED, actor=actor, detail={"proved_with": proof_words(proof)}
        ),
        keep_session=keep_session,
        notice=OwnerNotice(
            subject="Your authenticator app was replaced",
            change="The authenticator app of your account was replaced",
        ),
    ) as sessions:
        _confirmed(TOTPDevice, user).delete()
        StaticDevice.objects.filter(user=user, name=ENROLMENT).delete()
        device.confirmed = True
        device.save(update_fields=["confirmed"])
        codes = _recovery_codes_replace(user)
    return device, codes, len(sessions)


def authenticator_enrol_now(user: User, *, actor: Actor) -> tuple[str, list[str]]:
    """Enrol at account creation (``add_staff``): a confirmed authenticator whose URI
    the new colleague scans, and recovery codes; returns both."""
    with transaction.atomic():
        account_event_append(
            user,
            AuditEvent(action=AuditAction.MFA_ENROLLED, actor=actor, detail={"via": "add_staff"}),
        )
        TOTPDevice.objects.filter(user=user).delete()
        StaticDevice.objects.filter(user=user, name=ENROLMENT).delete()
        device = TOTPDevice.objects.create(user=user, name=AUTHENTICATOR, confirmed=True)
        return device.config_url, _recovery_codes_replace(user)


def recovery_codes_issue(user: User, token: str, *, actor: Actor) -> list[str]:
    """New recovery codes (the old ones stop working), after a code from the app."""
    device = authenticator(user)
    if device is None or not _verify(device, normalise(token)):
        raise SecondFactorRefused("That code does not match the authenticator app.")
    with transaction.atomic():
        account_event_append(
            user,
            AuditEvent(
                action=AuditAction.RECOVERY_CODES_ISSUED,
                actor=actor,
                detail={"count": RECOVERY_CODE_COUNT},
            ),
        )
        return _recovery_codes_replace(user)


def owner_confirm(user: User, *, password: str, current_token: str, address: str | None) -> Device:
    """The step a session alone cannot take (it may be stolen): ``user``'s password and
    a code from one of their current devices (the app, or a recovery code). Counted by
    the sign-in lockout first, so it cannot be used to guess the password; a wrong
    password and a wrong code get one message. Returns the device the code opened."""
    lockout.password_check(
        user, password, address=address, refused=SecondFactorRefused, wrong=REPLACE_REFUSED
    )
    try:
        proof = device_for_token(user, current_token)
    except SecondFactorRefused:
        proof = None  # throttled: the same answer, so the password's rightness stays unsaid
    if proof is None:
        raise SecondFactorRefused(REPLACE_REFUSED)
    lockout.attempts_clear(username=user.get_username(), address=address)
    return proof


def proof_words(proof: Device) -> str:
    """How an owner proved it was them, for the event: ``authenticator`` or
    ``recovery_code``."""
    return "recovery_code" if isinstance(proof, StaticDevice) else AUTHENTICATOR


def mfa_reset(
    target: User,
    *,
    actor: Actor,
    reason: str,
    confirmer: User | None = None,
    password: str = "",
    current_token: str = "",
) -> str:
    """A supervisor resets a colleague's second factor: every device goes, and one
    enrolment code is returned for the supervisor to hand over in person. With it and
    their password the colleague signs in once and must enrol a new authenticator.

    The supervisor never sees the new secret, so cannot sign in as the colleague; nobody
    resets their own (four eyes, as for overrides). From the staff page the supervisor
    (``confirmer``) confirms with their own password and current code, as for replacing
    one's own; every session of the colleague ends, and the colleague is e-mailed."""
    if actor.role != Role.SUPERVISOR:
        raise SecondFactorRefused("Only a supervisor may reset a second factor.")
    if target.get_username() == actor.username:
        raise SecondFactorRefused("A different supervisor must reset your second factor.")
    if confirmer is not None:
        owner_confirm(
            confirmer,
            password=password,
            current_token=current_token,
            address=actor.address or None,
        )
    code = _new_code()
    with account_change(
        target,
        AuditEvent(
            action=AuditAction.MFA_RESET,
            actor=actor,
            reason_text=reason,
            detail={"devices_removed": _device_count(target)},
        ),
        ended_as="sessions_ended",
        keep_session=None,
        notice=OwnerNotice(
            subject="Your second factor was reset",
            change="The second factor of your account was reset by a supervisor",
        ),
    ):
        TOTPDevice.objects.filter(user=target).delete()
        StaticDevice.objects.filter(user=target).delete()
        WebAuthnCredential.objects.filter(user=target).delete()  # passkeys too
        device = StaticDevice.objects.create(user=target, name=ENROLMENT, confirmed=True)
        device.token_set.create(token=code)
    return format_code(code)


# --- helpers -----------------------------------------------------------------------------


def format_code(code: str) -> str:
    return f"{code[:5]}-{code[5:]}"


def _new_code() -> str:
    # 10 base32 characters: 50 bits, single use, throttled on failure.
    return b32encode(secrets.token_bytes(10)).decode()[:10].lower()


def _recovery_codes_replace(user: User) -> list[str]:
    StaticDevice.objects.filter(user=user, name=RECOVERY).delete()
    device = StaticDevice.objects.create(user=user, name=RECOVERY, confirmed=True)
    codes = [_new_code() for _ in range(RECOVERY_CODE_COUNT)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=c) for c in codes)
    return [format_code(c) for c in codes]


def _confirmed(model: type[Device], user: User) -> QuerySet[Device]:
    # django-otp ships no type information: its managers are Any to mypy.
    confirmed: QuerySet[Device] = model.objects.filter(user=user, confirmed=True)
    return confirmed


def _device_count(user: User) -> int:
    count: int = (  # the device models are Any to mypy (no type information shipped)
        TOTPDevice.objects.filter(user=user).count()
        + StaticDevice.objects.filter(user=user).count()
        + WebAuthnCredential.objects.filter(user=user).count()
    )
    return count


# --- the gate ----------------------------------------------------------------------------

ENROLMENT_PATHS = ("/accounts/profile/", "/accounts/logout/")


class SecondFactorMiddleware:
    """Sessions of roles that require a second factor must have passed one.

    A session without it (opened before the requirement was switched on) is signed out.
    A session opened with a supervisor's enrolment code, or by an account that has no
    authenticator, reaches only the profile page until one is enrolled.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if (
            user is not None
            and not request.path.startswith(UNGATED_PATHS)
            and user.is_authenticated
            and mfa_required(user)
        ):
            if not user.is_verified():
                logout(request)
                return to_sign_in(request)
            if not request.path.startswith(ENROLMENT_PATHS) and needs_enrolment(request):
                return redirect_to(request, reverse("profile"))
        return self.get_response(request)


def redirect_to(request: HttpRequest, url: str) -> HttpResponse:
    if getattr(request, "htmx", False):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return HttpResponseRedirect(url)
