"""A change to an account that its other sessions must not outlive (docs/security.md,
"Sessions"): a password set, an authenticator replaced, a passkey removed, a second
factor reset. Each is one :func:`account_change`: in one database transaction the
account's event is appended first (a change the audit trail refuses does not happen),
then the change is made and every session of the account but the one making it ends;
afterwards the account is e-mailed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from django.contrib.sessions.models import Session
from django.core.mail import send_mail
from django.db import transaction
from django.template.defaultfilters import pluralize
from django.utils import timezone

from dashboard.accounts.events import account_event_append
from dashboard.accounts.staff_sessions import live_sessions, sessions_delete
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OwnerNotice:
    """The e-mail that tells an account of a change to it: its ``subject``, and
    ``change``, the sentence that says what happened."""

    subject: str
    change: str


@contextmanager
def account_change(
    user: User,
    event: AuditEvent,
    *,
    keep_session: str | None,
    notice: OwnerNotice,
    ended_as: str = "other_sessions_ended",
) -> Iterator[list[Session]]:
    """The block makes the change. Before it, ``event`` is appended with how many
    sessions end added to its detail (under ``ended_as``); after it, every live session of
    ``user`` but ``keep_session`` ends, all in one transaction. When the block completes
    the account is told (``notice``). Yields the sessions that end."""
    with transaction.atomic():
        sessions = [s for s in live_sessions(user) if s.session_key != keep_session]
        account_event_append(
            user, replace(event, detail={**(event.detail or {}), ended_as: len(sessions)})
        )
        yield sessions
        sessions_delete(sessions)
    owner_tell(user, notice, actor=event.actor, ended=len(sessions))


def owner_tell(user: User, notice: OwnerNotice, *, actor: Actor, ended: int) -> None:
    """E-mail the account about a change to its second factor or password (no code, no
    secret). The change is made already: a mail server that refuses is logged, not
    undone."""
    if not user.email:
        logger.warning("account of %s changed; it has no e-mail", user.get_username())
        return
    body = (
        f"{notice.change} on {timezone.now():%Y-%m-%d %H:%M} UTC, by {actor.username} from "
        f"{actor.address or 'an unknown address'}. {ended} other "
        f"session{pluralize(ended)} of your account {pluralize(ended, 'was,were')} signed out."
        "\n\nIf this was not you, tell a supervisor at once: they can reset "
        "your second factor, and your password should be changed.\n"
    )
    try:
        send_mail(notice.subject, body, None, [user.email])
    except Exception:
        logger.exception("could not e-mail %s about an account change", user.get_username())
