"""Sign-ins as audit events on the account's ``STAFF#`` stream (docs/security.md): each
success, each checked failure (wrong password, or right password and a wrong, missing
or throttled code), and the lockout they lead to. Never the password or a code.

Only accounts with a staff role have a stream, so a name that is no account writes
nothing (anyone may type any name). Attempts the lockout refused unchecked are not
events of their own: the lockout event marks where they begin. A sign-in is a POST of
credentials; ``force_login`` (tests, tooling) is none.

Signing in is not an account change: when the trail cannot be written the sign-in still
goes ahead, and the server log says what was not recorded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from dashboard.accounts.events import account_event_append
from dashboard.accounts.lockout import ATTEMPT_NUMBER, REFUSED_UNCHECKED
from dashboard.auth import actor_for_user, user_role
from reconciliation.audit.append import AuditAppendContended
from reconciliation.audit.models import AuditAction, AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

logger = logging.getLogger(__name__)


def _append(request: HttpRequest, user: User, action: AuditAction, detail: dict[str, Any]) -> None:
    role = user_role(user)
    if role is None:
        return
    actor = actor_for_user(request, user, role=role)
    try:
        account_event_append(user, AuditEvent(action=action, actor=actor, detail=detail))
    except (BotoCoreError, ClientError, AuditAppendContended) as exc:
        logger.warning(
            "sign-in event %s for %s not recorded: %s",
            action,
            user.get_username(),
            exc.__class__.__name__,
        )


def _signed_in(
    sender: type[User], request: HttpRequest | None, user: User, **kwargs: object
) -> None:
    if request is None or getattr(request, "method", None) != "POST":
        return
    device = getattr(user, "otp_device", None)
    factor = "none" if device is None else "authenticator"
    if isinstance(device, WebAuthnCredential):
        factor = "passkey"
    elif device is not None and not isinstance(device, TOTPDevice):
        factor = "single_use_code"  # a recovery or enrolment code
    _append(request, user, AuditAction.SIGN_IN_SUCCEEDED, {"second_factor": factor})


def _sign_in_failed(
    sender: str,
    credentials: dict[str, Any] | None,
    request: HttpRequest | None = None,
    **kwargs: object,
) -> None:
    if request is None or getattr(request, REFUSED_UNCHECKED, False):
        return
    username = (credentials or {}).get("username")
    user = get_user_model().objects.filter(username=username).first() if username else None
    if user is None:
        return
    stage = (credentials or {}).get("stage", "password")
    _append(request, user, AuditAction.SIGN_IN_FAILED, {"stage": stage})
    if _locks_out(request):
        minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
        _append(
            request,
            user,
            AuditAction.SIGN_IN_LOCKED_OUT,
            {"failures": settings.AXES_FAILURE_LIMIT, "cool_off_minutes": minutes},
        )


def _locks_out(request: HttpRequest) -> bool:
    """Whether this failed attempt is the one that locks the name out: the attempt that
    took the number AXES_FAILURE_LIMIT from the atomic counter (dashboard/accounts/
    lockout.py). Failures sent at once each read axes' recorded count before the others
    are recorded, so that count may pass the limit with no request seeing it equal; the
    counter's numbers are handed out one by one. Without Redis, axes' count is what
    refuses, so it is what decides here too (best effort, as the lockout then is)."""
    number = getattr(request, ATTEMPT_NUMBER, None)
    if number is None:
        # axes' handler ran first (it was connected first) and counted this failure.
        number = getattr(request, "axes_failures_since_start", None)
    return number == settings.AXES_FAILURE_LIMIT


def connect() -> None:
    user_logged_in.connect(_signed_in, dispatch_uid="dashboard.signin_audit.signed_in")
    user_login_failed.connect(_sign_in_failed, dispatch_uid="dashboard.signin_audit.failed")
