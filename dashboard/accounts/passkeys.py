"""Passkeys (WebAuthn) as a second factor beside the authenticator app (docs/security.md,
"Passkeys"): supervisors and auditors may enrol one on their profile, and sign in with
it in place of the app's code. The ceremonies and their cryptography are
django-otp-webauthn's (its ``WebAuthnHelper``, its ``WebAuthnCredential`` device); this
module only fits them to the one-POST sign-in (dashboard/accounts/forms.py · ``StaffSignInForm``):

- the sign-in page asks for a challenge (``sign_in_options``) naming no account, so it
  tells nobody which names have passkeys; the browser signs it with a discoverable
  credential and the form posts the answer with the username and password, checked
  after the password, with the same single answer for every failure;
- enrolment (``enrol_begin``, ``enrol_complete``) needs a session already verified by a
  second factor and is a ``passkey_enrolled`` event on the account's ``STAFF#`` stream;
- its owner renames one (``passkey_rename``) and removes one (``passkey_remove``: the
  password and a current code, as for replacing the authenticator; the other sessions
  end; never the last second factor a role requires), each an event on that stream.

The relying party is the host the page was served from (without its port), the origin
the scheme and host. It must be a domain name: browsers refuse an IP address, so on
``http://127.0.0.1:8000/`` no passkey is offered and the pages say to open
``http://localhost:8000/`` (:func:`where_passkeys_work`); ``localhost`` works over plain
HTTP.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import split_domain_port
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_otp.models import Device
from django_otp_webauthn.helpers import WebAuthnHelper
from django_otp_webauthn.models import WebAuthnCredential
from webauthn.helpers.structs import ResidentKeyRequirement

from dashboard.accounts import mfa, passkey_challenges
from dashboard.accounts.account_changes import OwnerNotice, account_change
from dashboard.accounts.events import account_event_append
from dashboard.auth import StaffRequest, actor_for, role_required, user_role
from reconciliation.actors import Actor, Role
from reconciliation.audit.append import AuditAppendContended
from reconciliation.audit.models import AuditAction, AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

PASSKEY_ROLES = frozenset({Role.SUPERVISOR, Role.AUDITOR})
AUDIT_UNAVAILABLE = (BotoCoreError, ClientError, AuditAppendContended)
ENROL_STATE = "passkey_enrol_state"


def rp_id(request: HttpRequest) -> str:
    """The relying party: the host the page was served from, without its port."""
    return split_domain_port(request.get_host())[0]


def where_passkeys_work(request: HttpRequest) -> str:
    """Empty when a browser can make and use a passkey on the host this page came from;
    else where to go instead. A relying party is a domain name (WebAuthn), so on an IP
    address every browser refuses: for a loopback one, the same port on ``localhost``."""
    host, port = split_domain_port(request.get_host())
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return ""
    if not address.is_loopback:
        return "this site by its name"
    scheme = "https" if request.is_secure() else "http"
    return f"{scheme}://localhost{':' + port if port else ''}/"


# django-otp-webauthn ships no type information, so its helper is Any to mypy.
class Helper(WebAuthnHelper):  # type: ignore[misc]
    """The library's helper: origin from the request, discoverable credentials only (the
    sign-in challenge names no account)."""

    def get_allowed_origins(self) -> list[str]:
        scheme = "https" if self.request.is_secure() else "http"
        return [f"{scheme}://{self.request.get_host()}"]

    def get_discoverable_credentials_preference(self) -> ResidentKeyRequirement:
        return ResidentKeyRequirement.REQUIRED


def may_enrol(user: User) -> bool:
    return user_role(user) in PASSKEY_ROLES


def passkeys_of(user: User) -> QuerySet[WebAuthnCredential]:
    # django-otp-webauthn ships no type information: its managers are Any to mypy.
    passkeys: QuerySet[WebAuthnCredential] = WebAuthnCredential.objects.filter(
        user=user, confirmed=True
    ).order_by("created_at")
    return passkeys


def has_passkey(user: User) -> bool:
    return passkeys_of(user).exists()


# --- sign-in -----------------------------------------------------------------------------


@require_POST
@never_cache
def sign_in_options(request: HttpRequest) -> HttpResponse:
    """A challenge for the sign-in page, naming no account; its state kept for the
    form's POST, once, outside any session: a press before sign-in opens none
    (dashboard/accounts/passkey_challenges.py)."""
    options, state = Helper(request).authenticate_begin(user=None, require_user_verification=True)
    response = JsonResponse(options)
    try:
        passkey_challenges.challenge_keep(response, state)
    except passkey_challenges.ChallengeUnavailable:
        return JsonResponse({"detail": "Passkeys are unavailable: use the code."}, status=503)
    return response


def sign_in_device(
    request: HttpRequest | None, user: User, answer: str
) -> WebAuthnCredential | None:
    """The passkey of ``user`` that signed this browser's challenge in ``answer``, or
    None (no challenge, a malformed answer, another account's or a disabled passkey, a
    wrong signature). The challenge is spent either way."""
    state = passkey_challenges.challenge_take(request) if request is not None else None
    if not state or not answer:
        return None
    try:
        data = json.loads(answer)
        device = Helper(request).authenticate_complete(user=user, state=state, data=data)
    except Exception as exc:  # the library's and py_webauthn's refusals, malformed JSON
        logger.info("passkey refused at sign-in: %s", exc.__class__.__name__)
        return None
    if not device.confirmed or not user.is_active:
        return None
    return device


# --- enrolment ---------------------------------------------------------------------------


def _verified(request: HttpRequest) -> bool:
    """This session passed a second factor (django-otp's ``is_verified``)."""
    check = getattr(request.user, "is_verified", None)
    return bool(check and check())


@require_POST
@never_cache
@role_required(Role.SUPERVISOR, Role.AUDITOR)
def enrol_begin(request: StaffRequest) -> HttpResponse:
    if not _verified(request):
        return JsonResponse({"detail": "Sign in with your second factor first."}, status=403)
    options, state = Helper(request).register_begin(user=request.user)
    request.session[ENROL_STATE] = state
    return JsonResponse(options)


@require_POST
@never_cache
@role_required(Role.SUPERVISOR, Role.AUDITOR)
def enrol_complete(request: StaffRequest) -> HttpResponse:
    state = request.session.pop(ENROL_STATE, None)
    request.session.save()  # the challenge is spent even if what follows fails
    if not state or not _verified(request):
        return JsonResponse({"detail": "Start again."}, status=400)
    try:
        data = json.loads(request.body)
    except ValueError:
        return JsonResponse({"detail": "Not a passkey answer."}, status=400)
    before = passkeys_of(request.user).count()
    try:
        with transaction.atomic():
            device = Helper(request).register_complete(user=request.user, state=state, data=data)
            # Checked and saved; the event, in the same transaction: refused, no passkey.
            account_event_append(
                request.user,
                AuditEvent(
                    action=AuditAction.PASSKEY_ENROLLED,
                    actor=actor_for(request),
                    detail={"passkeys_before": before},
                ),
            )
    except AUDIT_UNAVAILABLE:
        return JsonResponse({"detail": "The audit trail could not be written."}, status=503)
    except Exception as exc:  # the library's and py_webauthn's refusals
        logger.info("passkey refused at enrolment: %s", exc.__class__.__name__)
        return JsonResponse({"detail": "The passkey could not be checked."}, status=400)
    return JsonResponse({"id": device.pk})


# --- renaming and removing one's own -----------------------------------------------------

NAME_MAX = 64
LAST_FACTOR = (
    "This passkey is your last second factor, and your role signs in with one: set up "
    "the authenticator app (or add another passkey) first."
)


class PasskeyNotFound(Exception):
    """No confirmed passkey of this account has that id (another person's included)."""


class LastSecondFactor(mfa.SecondFactorRefused):
    """Removing it would leave a role that requires a second factor without one."""


def passkey_of(user: User, passkey_id: int) -> WebAuthnCredential:
    """``user``'s own passkey by its id; another person's is not found, like none."""
    found = passkeys_of(user).filter(pk=passkey_id).first()
    if found is None:
        raise PasskeyNotFound(passkey_id)
    return found


def passkey_rename(user: User, *, passkey_id: int, name: str, actor: Actor) -> WebAuthnCredential:
    """Rename one's own passkey (``name`` already 1-64 characters, the form's rule); the
    event first, in the transaction."""
    with transaction.atomic():
        device = passkey_of(user, passkey_id)
        account_event_append(
            user,
            AuditEvent(
                action=AuditAction.PASSKEY_RENAMED,
                actor=actor,
                detail={"passkey": device.pk, "name_before": device.name, "name_after": name},
            ),
        )
        device.name = name
        device.save(update_fields=["name"])
    return device


def passkey_remove(
    user: User,
    *,
    passkey_id: int,
    password: str,
    current_token: str,
    actor: Actor,
    keep_session: str | None,
) -> tuple[Device, int]:
    """Remove one's own passkey. A session alone is not enough: the password and a code
    from the app or a recovery code (``mfa.owner_confirm``, counted by the lockout).
    Refused (:class:`LastSecondFactor`) when it is the last second factor the role
    requires. Every other session of the account ends; the account is e-mailed. Returns
    the device the code opened (it verifies this session from now on) and how many
    sessions ended."""
    device = passkey_of(user, passkey_id)
    others = passkeys_of(user).exclude(pk=device.pk).exists()
    if mfa.mfa_required(user) and mfa.authenticator(user) is None and not others:
        raise LastSecondFactor(LAST_FACTOR)
    proof = mfa.owner_confirm(
        user, password=password, current_token=current_token, address=actor.address or None
    )
    with account_change(
        user,
        AuditEvent(
            action=AuditAction.PASSKEY_REMOVED,
            actor=actor,
            detail={
                "passkey": device.pk,
                "name": device.name,
                "proved_with": mfa.proof_words(proof),
            },
        ),
        keep_session=keep_session,
        notice=OwnerNotice(
            subject="A passkey was removed from your account",
            change=f'The passkey "{device.name}" was removed from your account',
        ),
    ) as sessions:
        device.delete()
    return proof, len(sessions)
