"""The audit event as a dataclass: an :class:`AuditEvent` placed by
``audit_event_build`` is stored exactly as the 15-keyword builder stored it before."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciliation.actors import Actor, Role
from reconciliation.audit.append import audit_event_append
from reconciliation.audit.models import AuditEvent
from reconciliation.audit.repository import audit_event_build, canonical_json, event_hash
from tests.helpers import AS_SYSTEM, repositories

ADA = Actor(
    username="ada",
    role=Role.FINANCE_STAFF,
    email="ada@example.org",
    address="10.0.0.1",
    correlation_id="corr-1",
)
SYSTEM = Actor(username="system", role=Role.SYSTEM, correlation_id="corr-2")
AT = datetime(2024, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)

# Captured once from the keyword builder as it was before this change, e.g.
#   audit_event_build(stream="CASE#c-0001", seq=7, prev_hash="ab" * 32,
#                     action="override_approved", actor=ADA, at=AT, event_id=..., ...)
# and pasted here: never re-derived with the code under test.
FULL_STORED = {
    "action": "override_approved",
    "actor": {"email": "ada@example.org", "role": "finance_staff", "username": "ada"},
    "after": {"state": "RESOLVED"},
    "at": "2024-03-01T09:30:15.123456Z",
    "at_id": "2024-03-01T09:30:15.123456Z#00000000-0000-4000-8000-000000000002",
    "before": {"state": "OVERRIDE_REQUESTED"},
    "case_id": "c-0001",
    "client_address": "10.0.0.1",
    "correlation_id": "corr-1",
    "day_shard": "2024-03-01#7",
    "detail": {"none": None, "request": {"action": "VOID_PLEDGE"}},
    "disposition": "VOID_PLEDGE",
    "event_id": "00000000-0000-4000-8000-000000000002",
    "hash": "b2a6228b361b32f730420209abd142dc16967e80765dff008ab047a9ed98a6b5",
    "intent_id": "i-0001",
    "prev_hash": "ab" * 32,
    "reason_code": "DATA_ENTRY",
    "reason_text": "Voided on a supervisor's word",
    "seq": 7,
    "stream": "CASE#c-0001",
}
# Only action and actor given: every None attribute is left out of the item and the hash.
SPARSE_STORED = {
    "action": "account_created",
    "actor": {"email": "", "role": "system", "username": "system"},
    "at": "2024-03-01T09:30:15.123456Z",
    "at_id": "2024-03-01T09:30:15.123456Z#00000000-0000-4000-8000-000000000003",
    "client_address": "",
    "correlation_id": "corr-2",
    "day_shard": "2024-03-01#4",
    "event_id": "00000000-0000-4000-8000-000000000003",
    "hash": "bd5d1c8fd1d4341b088ec199f296f6d5bf8a72e53145c5ebb5f1dc52dfc09e97",
    "prev_hash": "0" * 64,
    "seq": 1,
    "stream": "ACCOUNT#bo",
}

FULL_EVENT = AuditEvent(
    action="override_approved",
    actor=ADA,
    at=AT,
    event_id="00000000-0000-4000-8000-000000000002",
    case_id="c-0001",
    intent_id="i-0001",
    before={"state": "OVERRIDE_REQUESTED"},
    after={"state": "RESOLVED"},
    disposition="VOID_PLEDGE",
    reason_code="DATA_ENTRY",
    reason_text="Voided on a supervisor's word",
    detail={"request": {"action": "VOID_PLEDGE"}, "none": None},
)
SPARSE_EVENT = AuditEvent(
    action="account_created",
    actor=SYSTEM,
    at=AT,
    event_id="00000000-0000-4000-8000-000000000003",
)


@pytest.mark.parametrize(
    ("event", "placement", "stored"),
    [
        (FULL_EVENT, {"stream": "CASE#c-0001", "seq": 7, "prev_hash": "ab" * 32}, FULL_STORED),
        (SPARSE_EVENT, {"stream": "ACCOUNT#bo", "seq": 1, "prev_hash": "0" * 64}, SPARSE_STORED),
    ],
    ids=["every-attribute", "action-and-actor-only"],
)
def test_placed_event_is_the_item_the_keyword_builder_stored(event, placement, stored):
    """An AuditEvent placed in its stream is the same item, key for key, with the same
    canonical JSON and hash, as the keyword builder produced for the same facts."""
    item = audit_event_build(event, **placement)
    assert item == stored
    assert list(item) == [k for k in _STORED_ORDER if k in stored]
    assert canonical_json({k: v for k, v in item.items() if k != "hash"}) == canonical_json(
        {k: v for k, v in stored.items() if k != "hash"}
    )
    assert event_hash(item) == stored["hash"]


# The order the builder has always written the keys in (the hash sorts them; a reader of
# the raw item sees them in this order).
_STORED_ORDER = [
    "stream",
    "seq",
    "event_id",
    "at",
    "day_shard",
    "at_id",
    "actor",
    "client_address",
    "correlation_id",
    "action",
    "case_id",
    "intent_id",
    "before",
    "after",
    "disposition",
    "reason_code",
    "reason_text",
    "detail",
    "prev_hash",
    "hash",
]


def test_appended_event_is_stored_as_built(ddb):
    """audit_event_append puts the placed event as the head of its stream, and what
    DynamoDB hands back is the item with the captured hash."""
    stored = audit_event_append(AS_SYSTEM.store, stream="ACCOUNT#bo", event=SPARSE_EVENT)
    assert stored == SPARSE_STORED
    assert repositories().audit.stream_events("ACCOUNT#bo") == [SPARSE_STORED]


def test_event_is_frozen():
    """An event is a value: once built it cannot be changed on its way to the chain."""
    with pytest.raises(AttributeError):
        FULL_EVENT.action = "forged"  # type: ignore[misc]
