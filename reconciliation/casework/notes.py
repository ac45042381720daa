"""Notes on a case (docs/notes-and-notifications.md): free text by the people working it,
each an audit event on the case's stream (``CASE_NOTE_ADDED``, the text in its detail).

A note changes nothing of the case, so it takes no new case version: a colleague's open
form and a pending override's pinned version stay current. It still moves the case's
stored audit head in the same transaction as its event, conditioned on the head it read
(``CaseRepository.audit_head_item``), so the case item and its stream stay in step and
``verify_audit`` passes. A note depends on nothing of the case's state, so losing that
condition to another hand is answered by reading the case again and appending after it;
a resolved case still takes notes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.repository import AuditRepository, audit_event_build
from reconciliation.cases.actions import ActionResult, StaffAction, already_applied, check_role
from reconciliation.cases.changes import CaseError, CaseNotFound
from reconciliation.cases.policy import Permission, visible_length
from reconciliation.cases.repository import CaseRepository
from reconciliation.dynamo.cancellation import CancellationCode
from reconciliation.dynamo.errors import cancellation_codes
from reconciliation.dynamo.items import transact_items
from reconciliation.dynamo.retry import with_retry
from reconciliation.stores import Store

MAX_NOTE_LENGTH = 2000
# Appends that lose to another hand before the note gives up (each re-reads the case).
NOTE_ATTEMPTS = 3


class InvalidNote(CaseError):
    """The note's text is empty or too long: nothing was written."""

    code = "invalid_note"


def note_text(text: str | None) -> str:
    """The note as stored: stripped, with something a reader sees, at most
    :data:`MAX_NOTE_LENGTH` characters; raises :class:`InvalidNote` otherwise."""
    body = (text or "").strip()
    if not visible_length(body):
        raise InvalidNote("Write the note first: it is empty.")
    if len(body) > MAX_NOTE_LENGTH:
        raise InvalidNote(f"Keep the note to {MAX_NOTE_LENGTH:,} characters; it has {len(body):,}.")
    return body


def note_of(event: dict[str, Any]) -> str:
    """The text of a note event, or ``""`` for any other event."""
    if event.get("action") != AuditAction.CASE_NOTE_ADDED:
        return ""
    return str((event.get("detail") or {}).get("note") or "")


def case_note_add(
    *,
    case_id: str,
    text: str | None,
    staff: StaffAction,
    mentions: Iterable[str] = (),
    store: Store,
) -> ActionResult:
    """Append a note to the case's audit stream, by ``staff.actor``. ``mentions`` are the
    usernames the edge found in the text and will notify; they are recorded with the
    note. The same ``staff.action_id`` (a form submitted twice) adds the note once. A
    note takes no case version and no reason (its text is its own)."""
    actor, action_id = staff.actor, staff.action_id
    check_role(actor, Permission.NOTE)
    body = note_text(text)
    named = sorted(set(mentions))
    cases, audit = CaseRepository(store), AuditRepository(store)
    stream = f"CASE#{case_id}"
    for _ in range(NOTE_ATTEMPTS):
        case = cases.get(case_id)
        if case is None:
            raise CaseNotFound(f"No case {case_id}.")
        if action_id and _noted(audit, stream, action_id):
            return already_applied(case)
        event = audit_event_build(
            AuditEvent(
                action=AuditAction.CASE_NOTE_ADDED,
                actor=actor,
                case_id=case.case_id,
                intent_id=case.intent_id,
                detail={"note": body, "mentions": named, "action_id": action_id},
            ),
            stream=stream,
            seq=case.audit_seq + 1,
            prev_hash=case.audit_head,
        )
        head = cases.audit_head_item(case, seq=event["seq"], head=event["hash"])
        if _append(store, [head, audit.put_item(event)]):
            noted = replace(case, audit_seq=event["seq"], audit_head=event["hash"])
            return ActionResult(noted, True, "Note added.")
    raise CaseError(
        "The case kept changing while the note was being added; nothing was added. Send it again."
    )


def _noted(audit: AuditRepository, stream: str, action_id: str) -> bool:
    """Whether the case's newest note came from this very form (a double submission)."""
    latest = audit.latest_event(stream, action=AuditAction.CASE_NOTE_ADDED)
    if latest is None:
        return False
    return (latest.get("detail") or {}).get("action_id") == action_id


def _append(store: Store, items: list[dict[str, Any]]) -> bool:
    """Send the note's transaction; ``False`` when another hand appended to the case
    since it was read (either condition failed: read again and retry)."""
    try:
        with_retry(lambda: store.client.transact_write_items(TransactItems=transact_items(items)))
    except ClientError as exc:
        codes = cancellation_codes(exc)
        lost = {CancellationCode.CONDITIONAL_CHECK_FAILED, CancellationCode.NONE}
        if not codes or not set(codes) <= lost:
            raise
        return False
    return True
