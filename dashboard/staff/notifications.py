"""In-app notifications (docs/notes-and-notifications.md): who is told what, once the
action that causes it has succeeded.

The views call these after their service returned an applied result; the override
expiry, which no request makes, reaches :func:`_expired` through
``reconciliation.casework.hooks.override_expired``. Nobody is told about their own
action. A notification is never worth an action: every failure here is logged and
swallowed, inside its own savepoint, so the request's database work goes on.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ParamSpec

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from dashboard.staff.models import Notification, NotificationKind
from reconciliation.actors import STAFF_ROLES, Role
from reconciliation.audit.models import AuditAction
from reconciliation.cases.models import OverrideRequest
from reconciliation.cases.vocabulary import Override
from reconciliation.casework.hooks import override_expired

logger = logging.getLogger(__name__)

# ``@name``: Django's username characters, not preceded by one of them (an e-mail
# address is no mention) and not ending in a dot (the end of a sentence).
MENTION_RE = re.compile(r"(?<![\w.@+-])@([\w.@+-]*[\w+-])")
EXCERPT_LENGTH = 200
# Distinct @names looked up per note: a note is at most 2000 characters, and a list of
# hundreds of names is no message to colleagues.
MAX_MENTIONS = 50

P = ParamSpec("P")


def never_fails(notify: Callable[P, None]) -> Callable[P, None]:
    """Run ``notify`` in a savepoint; log and swallow whatever it raises."""

    @functools.wraps(notify)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            with transaction.atomic():
                notify(*args, **kwargs)
        except Exception:
            logger.exception("notification %s not created", notify.__name__)

    return wrapped


def _staff(usernames: Iterable[str]) -> list[User]:
    """The active users among ``usernames`` who hold a staff role."""
    return _staff_matching(Q(username__in=set(usernames)))


def _staff_matching(query: Q) -> list[User]:
    """The active users matching ``query`` who hold a staff role."""
    return list(
        User.objects.filter(
            query, is_active=True, groups__name__in=[str(r) for r in STAFF_ROLES]
        ).distinct()
    )


@dataclass(frozen=True)
class Mentions:
    """The ``@name``s of a text: the active staff they name (usernames as the accounts
    spell them) and the names, as written, that name nobody who could be told."""

    notified: tuple[str, ...]
    unknown: tuple[str, ...]


def mentions_in(text: str) -> Mentions:
    """Who ``text`` names as ``@name``, in any letter case (``@Supervisor`` told nobody:
    people write a colleague's name capitalised). A name spelt exactly as an account is
    that account; otherwise every account it names in another case."""
    names = sorted(set(MENTION_RE.findall(text or "")))[:MAX_MENTIONS]
    if not names:
        return Mentions((), ())
    by_folded: dict[str, list[str]] = {}
    query = Q()
    for name in names:
        query |= Q(username__iexact=name)
    for user in _staff_matching(query):
        by_folded.setdefault(user.username.casefold(), []).append(user.username)
    notified: set[str] = set()
    unknown: list[str] = []
    for name in names:
        accounts = by_folded.get(name.casefold(), [])
        if name in accounts:
            notified.add(name)
        elif accounts:
            notified.update(accounts)
        else:
            unknown.append(name)
    return Mentions(tuple(sorted(notified)), tuple(unknown))


@dataclass(frozen=True)
class _Notice:
    """What every recipient of one notification is told: its kind, the case, who did
    what, and as the kind needs, the override, an excerpt of the note, the request."""

    kind: NotificationKind
    case_id: str
    actor: str
    action: AuditAction
    override: Override | None = None
    excerpt: str = ""
    request_id: str = ""


def _create(recipients: Iterable[User], notice: _Notice) -> None:
    Notification.objects.bulk_create(
        Notification(
            recipient=user,
            kind=notice.kind,
            case_id=notice.case_id,
            actor=notice.actor,
            action=notice.action,
            override=notice.override or "",
            excerpt=notice.excerpt[:EXCERPT_LENGTH],
            request_id=notice.request_id,
        )
        for user in recipients
        if user.username != notice.actor  # never the person who acted
    )


@never_fails
def notify_assigned(*, case_id: str, assignee: str | None, actor: str) -> None:
    """``assignee`` was given the case by someone else."""
    if assignee and assignee != actor:
        _create(
            _staff([assignee]),
            _Notice(
                NotificationKind.ASSIGNED,
                case_id=case_id,
                actor=actor,
                action=AuditAction.CASE_ASSIGNED,
            ),
        )


@never_fails
def notify_override_requested(
    *, case_id: str, request: OverrideRequest | None, override: Override, actor: str
) -> None:
    """Every active supervisor but the requester may decide it (``request``: the request
    as raised, so its decision can settle these notifications)."""
    supervisors = User.objects.filter(is_active=True, groups__name=Role.SUPERVISOR).distinct()
    _create(
        supervisors,
        _Notice(
            NotificationKind.APPROVAL_WAITING,
            case_id=case_id,
            actor=actor,
            action=AuditAction.OVERRIDE_REQUESTED,
            override=override,
            request_id=request.request_id if request else "",
        ),
    )


def notify_override_decided(
    *, case_id: str, request: OverrideRequest, action: AuditAction, actor: str
) -> None:
    """The requester of ``request`` learns it was approved, rejected or expired
    (``action``, an AuditAction), and the supervisors told it was waiting see it decided.
    Apart, so that one failing leaves the other done."""
    _tell_requester(case_id=case_id, request=request, action=action, actor=actor)
    _settle_waiting(case_id=case_id, request=request, action=action, actor=actor)


@never_fails
def _tell_requester(
    *, case_id: str, request: OverrideRequest, action: AuditAction, actor: str
) -> None:
    requester = request.requested_by.username
    _create(
        _staff([requester]),
        _Notice(
            NotificationKind.OVERRIDE_DECIDED,
            case_id=case_id,
            actor=actor,
            action=action,
            override=request.action,
        ),
    )


@never_fails
def _settle_waiting(
    *, case_id: str, request: OverrideRequest, action: AuditAction, actor: str
) -> None:
    """Every "approval waiting" about ``request`` is no longer new to anyone. A row that
    names no request (written before rows named theirs) is about this request or an
    earlier one of the case, all decided by now: a case holds one pending request at a
    time. A newer request's rows name it, so a late decision never settles them."""
    same_request = Q(request_id=request.request_id) | Q(request_id="")
    Notification.objects.filter(
        same_request,
        kind=NotificationKind.APPROVAL_WAITING,
        case_id=case_id,
        settled_by_action="",
    ).update(settled_by_action=action, settled_by=actor)


@never_fails
def notify_mentions(*, case_id: str, usernames: Iterable[str], note: str, actor: str) -> None:
    _create(
        _staff(usernames),
        _Notice(
            NotificationKind.MENTION,
            case_id=case_id,
            actor=actor,
            action=AuditAction.CASE_NOTE_ADDED,
            excerpt=note,
        ),
    )


def _expired(sender: Any, *, case_id: str, request: OverrideRequest, **kwargs: Any) -> None:
    notify_override_decided(
        case_id=case_id, request=request, action=AuditAction.OVERRIDE_EXPIRED, actor="system"
    )


def connect() -> None:
    override_expired.connect(_expired, dispatch_uid="dashboard.staff.notifications.expired")


def unread_count(user: Any) -> int:
    """The badge: one COUNT over the ``notification_unread`` index."""
    return Notification.objects.filter(recipient_id=user.pk).unread().count()
