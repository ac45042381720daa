"""The audit append primitive: canonical hashing, chaining, no forks."""

from __future__ import annotations

import hashlib
import json

import pytest

from reconciliation.actors import Actor, Role
from reconciliation.audit.repository import (
    GENESIS_HASH,
    audit_event_build,
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


def test_hash_is_sha256_of_canonical_json_without_hash():
    """hash = SHA-256 of sorted, compact, UTF-8 JSON of every other field."""
    event = audit_event_build(
        stream="CASE#x",
        seq=1,
        prev_hash=GENESIS_HASH,
        action="case_opened",
        actor=ACTOR,
        reason_text="café",
    )
    body = {k: v for k, v in event.items() if k != "hash"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert event["hash"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
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
        stream="SYSTEM",
        seq=1,
        prev_hash=GENESIS_HASH,
        action="digest",
        actor=ACTOR,
        detail={"n": 3, "ok": True, "none": None},
    )
    second = audit_event_build(
        stream="SYSTEM", seq=2, prev_hash=first["hash"], action="digest", actor=ACTOR
    )
    assert repo.append(first) and repo.append(second)
    rival = audit_event_build(
        stream="SYSTEM", seq=2, prev_hash=first["hash"], action="forged", actor=ACTOR
    )
    assert repo.append(rival) is False
    stored = repo.stream_events("SYSTEM")
    assert [e["seq"] for e in stored] == [1, 2]
    assert [event_hash(e) for e in stored] == [e["hash"] for e in stored]
    assert stored[1]["prev_hash"] == stored[0]["hash"]
    assert stored[1]["action"] == "digest"
    head = repo.head("SYSTEM")
    assert (head.seq, head.hash) == (2, second["hash"])
