"""The sessions a staff member can see and end (docs/security.md, "Sessions").

A session is Django's row (``django_session``); beside it a :class:`StaffSession` keeps
what its owner needs to recognise it: the device (from the user agent), the address and
when it was last seen (written at most once a minute). Only the SHA-256 of the session
key is kept there. The list on the profile page is the account's *live* Django sessions,
so a session ended elsewhere (timeout, reset, replacement) is gone from it at once.

Ending sessions deletes their Django rows, so their next request goes to the sign-in
page: the owner may end their other sessions, a supervisor all of a colleague's. Each is
a ``sessions_ended`` event on the account's ``STAFF#`` stream, appended first in the
database transaction that deletes them. A sign-out (or a session the server signs out:
timeout, missing second factor) is a ``signed_out`` event; like a sign-in it is not an
account change, so when the trail cannot take it the sign-out still happens, logged.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.contrib.sessions.models import Session
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from dashboard.accounts.events import account_event_append
from dashboard.accounts.models import StaffSession
from dashboard.auth import UNGATED_PATHS, actor_for_user, client_address, user_role
from reconciliation.actors import Actor
from reconciliation.audit.append import AuditAppendContended
from reconciliation.audit.models import AuditAction, AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

SEEN_EVERY_S = 60
# In the session: when its StaffSession's last_seen was last written (epoch seconds).
SESSION_RECORDED = "staff_session_seen_at"


def key_hash(session_key: str) -> str:
    return hashlib.sha256(session_key.encode()).hexdigest()


# --- what a person sees ------------------------------------------------------------------


@dataclass(frozen=True)
class SessionSeen:
    key_hash: str
    device: str
    address: str
    created_at: datetime | None
    last_seen: datetime | None
    current: bool


_BROWSERS = (
    ("Edg/", "Edge"),
    ("OPR/", "Opera"),
    ("Firefox/", "Firefox"),
    ("Chrome/", "Chrome"),
    ("Chromium/", "Chromium"),
    ("Safari/", "Safari"),
)
_SYSTEMS = (
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Android", "Android"),
    ("Windows", "Windows"),
    ("Mac OS X", "macOS"),
    ("Macintosh", "macOS"),
    ("CrOS", "ChromeOS"),
    ("Linux", "Linux"),
)


def device_words(user_agent: str) -> str:
    """ "Firefox on Windows", from the user agent; "Unknown device" when it says nothing
    we know (a script, an empty header)."""
    ua = user_agent or ""
    browser = next((name for mark, name in _BROWSERS if mark in ua), None)
    system = next((name for mark, name in _SYSTEMS if mark in ua), None)
    if browser is None and ua:
        tool = re.match(r"[A-Za-z][\w.-]{0,30}", ua)
        browser = tool.group(0) if tool else None
    if browser and system:
        return f"{browser} on {system}"
    return browser or system or "Unknown device"


def live_sessions(user: User) -> list[Session]:
    """The account's Django sessions that have not expired."""
    live = Session.objects.filter(expire_date__gt=timezone.now())
    return [s for s in live if str(s.get_decoded().get(SESSION_KEY)) == str(user.pk)]


def live_session_counts() -> dict[str, int]:
    """Live sessions per user id (as text), read once for the staff page."""
    counts: dict[str, int] = {}
    for session in Session.objects.filter(expire_date__gt=timezone.now()):
        pk = session.get_decoded().get(SESSION_KEY)
        if pk is not None:
            counts[str(pk)] = counts.get(str(pk), 0) + 1
    return counts


def sessions_seen(user: User, *, current_key: str | None) -> list[SessionSeen]:
    """The account's live sessions, the current one first, then the most recently seen;
    a session opened before this list existed shows as an unknown device."""
    hashes = {key_hash(s.session_key): s for s in live_sessions(user)}
    rows = {r.key_hash: r for r in StaffSession.objects.filter(user=user)}
    stale = [h for h in rows if h not in hashes]
    if stale:
        StaffSession.objects.filter(key_hash__in=stale).delete()
    current = key_hash(current_key) if current_key else None
    seen = []
    for digest in hashes:
        row = rows.get(digest)
        seen.append(
            SessionSeen(
                key_hash=digest,
                device=device_words(row.user_agent) if row else "Unknown device",
                address=row.address if row else "",
                created_at=row.created_at if row else None,
                last_seen=row.last_seen if row else None,
                current=digest == current,
            )
        )
    epoch = timezone.make_aware(datetime(1970, 1, 1))
    seen.sort(key=lambda s: (not s.current, -(s.last_seen or epoch).timestamp()))
    return seen


# --- ending them -------------------------------------------------------------------------


def sessions_end(user: User, *, actor: Actor, keep: str | None) -> int:
    """End every live session of ``user`` but ``keep`` (the one asking, when the owner
    asks): their Django rows are deleted, so their next request must sign in again. The
    ``sessions_ended`` event is appended first, in the transaction; if the trail refuses
    it nothing ends (the caller says so). Returns how many ended."""
    with transaction.atomic():
        sessions = [s for s in live_sessions(user) if s.session_key != keep]
        account_event_append(
            user,
            AuditEvent(
                action=AuditAction.SESSIONS_ENDED,
                actor=actor,
                detail={
                    "sessions_ended": len(sessions),
                    "by": "owner" if actor.username == user.get_username() else actor.role,
                    "current_kept": keep is not None,
                },
            ),
        )
        sessions_delete(sessions)
    return len(sessions)


def sessions_delete(sessions: list[Session]) -> None:
    """End ``sessions``: their Django rows (their next request must sign in again) and
    their records."""
    StaffSession.objects.filter(key_hash__in=[key_hash(s.session_key) for s in sessions]).delete()
    Session.objects.filter(session_key__in=[s.session_key for s in sessions]).delete()


# --- keeping the record ------------------------------------------------------------------


def session_rekeyed(old_key: str | None, new_key: str | None) -> None:
    """The session kept through a password change has a new key (Django cycles it in
    ``update_session_auth_hash``): its row follows, so it stays "this session"."""
    if old_key and new_key and old_key != new_key:
        StaffSession.objects.filter(key_hash=key_hash(old_key)).update(key_hash=key_hash(new_key))


def _record(request: HttpRequest, user: User) -> None:
    """Keep the session's record: one upsert, no read-then-write (the row is the
    session's own, so nothing else races for it but its own concurrent requests, and
    the last of those wins with the same values). Bookkeeping: a database that cannot
    take it now is logged, and the request goes on."""
    key = request.session.session_key
    if not key:
        return
    now = timezone.now()
    row = StaffSession(
        key_hash=key_hash(key),
        user=user,
        user_agent=request.META.get("HTTP_USER_AGENT", "")[:300],
        address=(client_address(request) or "")[:64],
        created_at=now,
        last_seen=now,
    )
    try:
        with transaction.atomic():
            StaffSession.objects.bulk_create(
                [row],
                update_conflicts=True,
                unique_fields=["key_hash"],
                update_fields=["user", "last_seen"],
            )
    except DatabaseError as exc:
        logger.warning(
            "session of %s not recorded: %s", user.get_username(), exc.__class__.__name__
        )
        return
    request.session[SESSION_RECORDED] = int(time.time())


class StaffSessionMiddleware:
    """Keeps the signed-in session's :class:`StaffSession` (created if missing: a session
    opened before the list existed); ``last_seen`` written at most once a minute. After
    the timeouts and the second-factor gate, so a session they end is not seen."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        session = getattr(request, "session", None)
        if (
            user is not None
            and session is not None
            and not request.path.startswith(UNGATED_PATHS)
            and user.is_authenticated
        ):
            recorded = session.get(SESSION_RECORDED)
            if recorded is None or int(time.time()) - recorded >= SEEN_EVERY_S:
                _record(request, user)
        return self.get_response(request)


def _signed_in(
    sender: type[User], request: HttpRequest | None, user: User, **kwargs: object
) -> None:
    if request is not None and hasattr(request, "session"):
        _record(request, user)


def _signed_out(
    sender: type[User] | None, request: HttpRequest | None, user: User | None, **kwargs: object
) -> None:
    """Before the session is flushed: its record goes, and the event says how it ended."""
    if user is None or request is None:
        return
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        StaffSession.objects.filter(key_hash=key_hash(key)).delete()
    role = user_role(user)
    if role is None:
        return
    actor = actor_for_user(request, user, role=role)
    how = "sign_out" if request.path.rstrip("/").endswith("/logout") else "ended_by_server"
    try:
        account_event_append(
            user, AuditEvent(action=AuditAction.SIGNED_OUT, actor=actor, detail={"how": how})
        )
    except (BotoCoreError, ClientError, AuditAppendContended) as exc:
        logger.warning(
            "sign-out of %s not recorded: %s", user.get_username(), exc.__class__.__name__
        )


def connect() -> None:
    user_logged_in.connect(_signed_in, dispatch_uid="dashboard.staff_sessions.signed_in")
    user_logged_out.connect(_signed_out, dispatch_uid="dashboard.staff_sessions.signed_out")
