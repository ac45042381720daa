"""The audit append primitive: canonical hashing, chaining, no forks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciliation.actors import Actor, Role
from reconciliation.audit.models import AuditEvent
from reconciliation.audit.repository import (
    GENESIS_HASH,
    audit_event_build,
    canonical_json,
    event_hash,
)
from tests.helpers import repositories

ACTOR = Actor(
    username="ada",
    role=Role.FINANCE_STAFF,
    email="ada@example.org",
    address="10.0.0.1",
    correlation_id="corr-1",
)


# Golden values, computed once and pasted here, never re-derived with the code's formula:
# a test that recomputes the hash the way the code does passes whatever the formula is.
GOLDEN_CANONICAL = (
    b'{"action":"disposition_recorded",'
    b'"actor":{"email":"ada@example.org","role":"finance_staff","username":"ada"},'
    b'"after":{"amount":"25.00","state":"RESOLVED"},'
    b'"at":"2024-03-01T09:30:15.123456Z",'
    b'"at_id":"2024-03-01T09:30:15.123456Z#00000000-0000-4000-8000-000000000001",'
    b'"before":{"amount":"25.00","state":"OPEN"},'
    b'"case_id":"c-0001","client_address":"10.0.0.1","correlation_id":"corr-1",'
    b'"day_shard":"2024-03-01#4",'
    b'"detail":{"n":2,"none":null,"ok":true,"tags":["b","a"]},'
    b'"disposition":"CONFIRMED_COMMITTED",'
    b'"event_id":"00000000-0000-4000-8000-000000000001","intent_id":"i-0001",'
    b'"prev_hash":"abababababababababababababababababababababababababababababababab",'
    b'"reason_code":"EVIDENCE_CONFIRMS",'
    b'"reason_text":"caf\xc3\xa9 \xe2\x9c\x93",'
    b'"seq":3,"stream":"CASE#c-0001"}'
)
GOLDEN_HASH = "88afcfa9fa3c37ae8115ba9a2454b27ed61e42cf14bd353515b51d9d6f012306"


def test_hash_is_sha256_of_canonical_json_without_hash():
    """One event built from fixed inputs has a fixed canonical JSON (sorted keys, compact,
    UTF-8 not escaped, nested nulls kept, no ``hash``) and a fixed SHA-256 over it.

    A different hash or canonical form for these same inputs means the hashing changed:
    every event already stored (and every exported file) was hashed the old way, so
    ``verify_audit``, the case pages' chain check and ``verify_export`` would report every
    stored chain broken. Change them only together with a plan for the stored chains,
    never by pasting new literals. (Only a field added to or dropped from *new* events
    leaves stored ones verifying; then the canonical literal changes on purpose.)"""
    event = audit_event_build(
        AuditEvent(
            action="disposition_recorded",
            actor=ACTOR,
            at=datetime(2024, 3, 1, 9, 30, 15, 123456, tzinfo=UTC),
            event_id="00000000-0000-4000-8000-000000000001",
            case_id="c-0001",
            intent_id="i-0001",
            before={"state": "OPEN", "amount": "25.00"},
            after={"state": "RESOLVED", "amount": "25.00"},
            disposition="CONFIRMED_COMMITTED",
            reason_code="EVIDENCE_CONFIRMS",
            reason_text="café ✓",
            detail={"n": 2, "ok": True, "none": None, "tags": ["b", "a"]},
        ),
        stream="CASE#c-0001",
        seq=3,
        prev_hash="ab" * 32,
    )
    assert canonical_json({k: v for k, v in event.items() if k != "hash"}) == GOLDEN_CANONICAL
    assert event["hash"] == event_hash(event) == GOLDEN_HASH
    assert event["actor"] == {
        "username": "ada",
        "email": "ada@example.org",
        "role": "finance_staff",
    }
    assert event["client_address"] == "10.0.0.1" and event["correlation_id"] == "corr-1"


@pytest.mark.django_db(databases=[])
def test_stored_events_round_trip_to_the_same_hash_and_never_fork(ddb):
    """Appended events read back hash to their stored hash; a second seq 2 is refused."""
    repo = repositories().audit
    first = audit_event_build(
        AuditEvent(action="digest", actor=ACTOR, detail={"n": 3, "ok": True, "none": None}),
        stream="SYSTEM",
        seq=1,
        prev_hash=GENESIS_HASH,
    )
    second = audit_event_build(
        AuditEvent(action="digest", actor=ACTOR), stream="SYSTEM", seq=2, prev_hash=first["hash"]
    )
    assert repo.append(first) and repo.append(second)
    rival = audit_event_build(
        AuditEvent(action="forged", actor=ACTOR), stream="SYSTEM", seq=2, prev_hash=first["hash"]
    )
    assert repo.append(rival) is False
    stored = repo.stream_events("SYSTEM")
    assert [e["seq"] for e in stored] == [1, 2]
    assert [event_hash(e) for e in stored] == [e["hash"] for e in stored]
    assert stored[1]["prev_hash"] == stored[0]["hash"]
    assert stored[1]["action"] == "digest"
    head = repo.head("SYSTEM")
    assert (head.seq, head.hash) == (2, second["hash"])
