"""Account changes as audit events: who was given which role, whose second factor was
enrolled or reset, and by whom. One stream per account, ``STAFF#{username}``, hash
chained like every other (docs/design.md §7), so an auditor reads a person's account history
in order and a checkpoint covers it.

Accounts themselves live in Django's database; the caller appends the event inside the
database transaction that makes the change, first, so a change the audit trail refused
(DynamoDB unreachable) is rolled back rather than left unrecorded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q

from reconciliation.audit.append import audit_event_append
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.stores import Store

STAFF_STREAM_PREFIX = "STAFF#"
STAFF_ACTIONS = frozenset(
    {
        AuditAction.STAFF_CREATED,
        AuditAction.STAFF_ROLE_CHANGED,
        AuditAction.STAFF_PASSWORD_SET,
        AuditAction.MFA_ENROLLED,
        AuditAction.MFA_RESET,
        AuditAction.MFA_REPLACED,
        AuditAction.RECOVERY_CODES_ISSUED,
        AuditAction.PASSKEY_ENROLLED,
        AuditAction.PASSKEY_RENAMED,
        AuditAction.PASSKEY_REMOVED,
        AuditAction.SIGN_IN_SUCCEEDED,
        AuditAction.SIGN_IN_FAILED,
        AuditAction.SIGN_IN_LOCKED_OUT,
        AuditAction.SIGNED_OUT,
        AuditAction.SESSIONS_ENDED,
        AuditAction.STAFF_CHANGED,
        AuditAction.STAFF_DELETED,
    }
)


def staff_stream(username: str) -> str:
    return f"{STAFF_STREAM_PREFIX}{username}"


def staff_event_append(store: Store, *, username: str, event: AuditEvent) -> dict[str, Any]:
    """Append ``event`` (one of ``STAFF_ACTIONS``) about the account ``username``, its
    detail naming the account; returns the event as stored."""
    if event.action not in STAFF_ACTIONS:
        raise ValueError(f"{event.action!r} is not an account action")
    return audit_event_append(
        store,
        stream=staff_stream(username),
        event=replace(event, detail={"account": username, **(event.detail or {})}),
    )


def staff_spellings(typed: str) -> tuple[str, ...]:
    """The usernames and addresses of the staff accounts whose username or address is
    ``typed`` in any letter case, as the accounts spell them: what the audit actor filter
    matches besides the typed text (events store the actor as spelt at the time)."""
    typed = typed.strip()
    if not typed:
        return ()
    accounts = get_user_model().objects.filter(Q(username__iexact=typed) | Q(email__iexact=typed))
    found: set[str] = set()
    for username, email in accounts.values_list("username", "email")[:20]:
        found.update(s for s in (username, email) if s)
    return tuple(sorted(found))
