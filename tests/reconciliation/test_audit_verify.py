"""Chain verification, the signed daily digest and ``manage.py verify_audit``: tampering
with one field, deleting one event and deleting a whole stream are each named."""

from __future__ import annotations

import io
import threading
from datetime import UTC, datetime, time, timedelta

import pytest
from django.core.management import call_command

from reconciliation import clock
from reconciliation.audit_synthetic import synthetic_events
from reconciliation.dynamo.items import to_item
from reconciliation.repositories import repositories
from reconciliation.repositories.audit import event_hash
from reconciliation.selectors_audit import subject_of
from reconciliation.services.audit import (
    DIGEST_ACTION,
    DIGEST_PART_ACTION,
    SYSTEM_STREAM,
    audit_daily_digest,
    audit_digest_write,
    audit_verify,
    heads_sha256,
)
from reconciliation.tasks.audit import audit_daily_digest as digest_task
from tests.helpers import audit_events

pytestmark = pytest.mark.django_db(databases=[])


def yesterday():
    return clock.now().date() - timedelta(days=1)


def put_subjects(ddb, events: list[dict]) -> None:
    """The case and pledge items of synthetic streams: only their keys and the head each
    stores (``audit_seq``, ``audit_head``), as the live write path keeps it. ``ddb`` is
    the engine fixture or a :class:`Repositories` (both carry ``client`` and ``tables``)."""
    heads = {e["stream"]: e for e in sorted(events, key=lambda e: (e["stream"], e["seq"]))}
    for stream, last in heads.items():
        kind, key = subject_of(stream)
        table, name = (
            (ddb.tables.cases, "case_id") if kind == "case" else (ddb.tables.pledges, "intent_id")
        )
        ddb.client.put_item(
            TableName=table,
            Item=to_item({name: key, "audit_seq": last["seq"], "audit_head": last["hash"]}),
        )


def seed(total: int = 80, *, day=None, tag: str = "") -> list[dict]:
    """``total`` chained events dated ``day`` (default yesterday) and their subjects'
    items, bulk-loaded."""
    day = day or yesterday()
    events = list(
        synthetic_events(total, start=datetime.combine(day, time.min, tzinfo=UTC), tag=tag)
    )
    repos = repositories()
    repos.audit.batch_put(events)
    put_subjects(repos, events)
    return events


def delete_subject(ddb, stream: str) -> None:
    kind, key = subject_of(stream)
    table, name = (
        (ddb.tables.cases, "case_id") if kind == "case" else (ddb.tables.pledges, "intent_id")
    )
    ddb.client.delete_item(TableName=table, Key={name: {"S": key}})


def longest_stream(events: list[dict]) -> tuple[str, list[dict]]:
    streams: dict[str, list[dict]] = {}
    for event in events:
        streams.setdefault(event["stream"], []).append(event)
    name = max(streams, key=lambda s: (len(streams[s]), s))
    return name, streams[name]


def run_verify(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("verify_audit", *args, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


def no_scans(ddb) -> list[str]:
    """Record every Scan the client sends (verification must use Queries only)."""
    seen: list[str] = []
    ddb.client.meta.events.register("before-call.dynamodb.Scan", lambda **kw: seen.append("x"))
    return seen


def test_intact_trail_verifies_with_queries_only(ddb):
    """A seeded trail and its digest verify: exit 0, every stream counted, no Scan."""
    events = seed(80)
    assert audit_daily_digest() == [yesterday().isoformat()]
    scans = no_scans(ddb)
    code, out = run_verify()
    streams = {e["stream"] for e in events}
    assert code == 0, out
    assert out.startswith("OK since ")
    assert f"{len(streams) + 1} streams, {len(events) + 1} events, 1 digests" in out
    assert scans == []


def test_changed_field_names_the_stream_and_seq(ddb):
    """Editing one stored field in DynamoDB: verification names that stream and seq with
    the recomputed and the stored hash, and the command exits non-zero."""
    name, chain = longest_stream(seed(80))
    victim = chain[1]
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": name}, "seq": {"N": "2"}},
        UpdateExpression="SET reason_text = :t",
        ExpressionAttributeValues={":t": {"S": "nothing to see here"}},
    )
    expected = event_hash({**victim, "reason_text": "nothing to see here"})
    code, out = run_verify()
    assert code == 1
    assert out.splitlines() == [
        f"{name} seq 2: hash mismatch: expected {expected} stored {victim['hash']}"
    ]


def test_deleted_event_is_reported_as_a_gap(ddb):
    """Deleting one event from the middle of a stream is reported as a gap at its seq."""
    name, chain = longest_stream(seed(80))
    assert len(chain) >= 3
    ddb.client.delete_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": name}, "seq": {"N": "2"}},
    )
    code, out = run_verify("--stream", name)
    assert code == 1
    assert out.splitlines() == [f"{name} seq 2: gap: seq 2 missing (next stored seq 3)"]


def test_deleting_a_whole_stream_fails_that_days_digest(ddb):
    """A stream deleted outright, its subject item with it, leaves no broken chain and
    no stored head behind, but the signed digest of its day lists its head, so
    verification names the missing head."""
    events = seed(80)
    audit_daily_digest()
    name, chain = longest_stream(events)
    for event in chain:
        ddb.client.delete_item(
            TableName=ddb.tables.audit_events,
            Key={"stream": {"S": name}, "seq": {"N": str(event["seq"])}},
        )
    delete_subject(ddb, name)
    report = audit_verify()
    digest = audit_events(ddb, SYSTEM_STREAM)[-1]
    head = chain[-1]
    assert report.problems == [
        f"digest {yesterday().isoformat()} (SYSTEM seq {digest['seq']}): stream {name} "
        f"seq {head['seq']} missing: expected hash {head['hash']}"
    ]


def test_rehashed_tail_is_caught_by_the_signed_digest(ddb):
    """Rewriting a stream's last event *and* its hash, and the head its subject item
    stores, keeps the chain and the item consistent; only the signed digest, which the
    writer cannot re-sign, exposes it."""
    events = seed(80)
    audit_daily_digest()
    name, chain = longest_stream(events)
    forged = {**chain[-1], "reason_text": "rewritten"}
    forged["hash"] = event_hash(forged)
    ddb.client.put_item(TableName=ddb.tables.audit_events, Item=to_item(forged))
    put_subjects(ddb, [forged])
    report = audit_verify()
    assert len(report.problems) == 1
    assert report.problems[0].endswith(
        f"stream {name} seq {forged['seq']}: expected hash {chain[-1]['hash']} "
        f"stored {forged['hash']}"
    )


def test_re_signed_digest_without_the_key_fails_its_signature(ddb):
    """A digest rewritten to drop a stream, with its SHA-256 and event hash recomputed,
    still carries the old signature: verification says the signature does not verify."""
    seed(30)
    audit_daily_digest()
    [digest] = [e for e in audit_events(ddb, SYSTEM_STREAM) if e["action"] == DIGEST_ACTION]
    detail = dict(digest["detail"])
    detail["heads"] = detail["heads"][1:]
    detail["stream_count"], detail["heads_sha256"] = heads_sha256(detail["heads"])
    forged = {**digest, "detail": detail}
    forged["hash"] = event_hash(forged)
    ddb.client.put_item(TableName=ddb.tables.audit_events, Item=to_item(forged))
    report = audit_verify()
    assert report.problems == [
        f"digest {detail['day']} (SYSTEM seq {digest['seq']}): signature does not verify"
    ]


def test_digest_is_written_once_per_utc_day(ddb):
    """The hourly task writes yesterday's digest on its first run and nothing after;
    two days later it writes exactly the two days since."""
    events = seed(20)
    assert digest_task() == [yesterday().isoformat()]
    assert digest_task() == []
    digests = [e for e in audit_events(ddb, SYSTEM_STREAM) if e["action"] == DIGEST_ACTION]
    assert [d["detail"]["day"] for d in digests] == [yesterday().isoformat()]
    assert digests[0]["detail"]["stream_count"] == len({e["stream"] for e in events})
    assert "AUDIT_SIGNING_KEY" not in str(digests[0]) and "signature" in digests[0]["detail"]
    with clock.travel(2 * 86400):
        days = [yesterday() - timedelta(days=1), yesterday()]
        assert digest_task() == [d.isoformat() for d in days]
        assert digest_task() == []


@pytest.mark.dynamodb_local_only  # a race: moto's in-process backend is not thread-safe
def test_concurrent_digest_writers_write_one_digest(ddb):
    """Four writers race for the same day at a barrier: the SYSTEM stream stays one
    chain and holds exactly one digest for the day."""
    seed(20)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            barrier.wait()
            audit_digest_write(repositories(), day=yesterday())
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    system = audit_events(ddb, SYSTEM_STREAM)
    assert [e["action"] for e in system] == [DIGEST_ACTION]
    assert audit_verify().ok


def test_large_day_spills_into_parts_and_a_deleted_part_is_named(ddb, monkeypatch):
    """A day with more heads than fit one item is digested in part events that the
    signed digest lists; it verifies, and deleting a part is reported. (The per-item
    limit is lowered to 25 heads so the test stays small.)"""
    monkeypatch.setattr("reconciliation.services.audit.digests.DIGEST_INLINE_HEADS", 25)
    repos = repositories()
    day = yesterday()
    events = list(
        synthetic_events(150, start=datetime.combine(day, time.min, tzinfo=UTC), tag="big")
    )
    repos.audit.batch_put(events)
    put_subjects(repos, events)
    digest = audit_digest_write(repos, day=day)
    streams = len({e["stream"] for e in events})
    assert streams > 25 and digest["detail"]["stream_count"] == streams
    assert "heads" not in digest["detail"] and len(digest["detail"]["parts"]) >= 2
    assert audit_verify(since=day).ok
    part_seq = digest["detail"]["parts"][0][0]
    part = repos.audit.event_at(SYSTEM_STREAM, part_seq)
    assert part["action"] == DIGEST_PART_ACTION
    ddb.client.delete_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": SYSTEM_STREAM}, "seq": {"N": str(part_seq)}},
    )
    problems = audit_verify(since=day).problems
    assert f"part SYSTEM seq {part_seq} missing or changed" in "\n".join(problems)


def test_default_start_walks_back_across_quiet_days(ddb):
    """Without --since, verification reaches a stream dated 12 days ago across empty
    days, and names its broken link; with --since after it, that stream is out of scope."""
    events = seed(12, day=clock.now().date() - timedelta(days=12))
    name, chain = longest_stream(events)
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": name}, "seq": {"N": "1"}},
        UpdateExpression="SET client_address = :a",
        ExpressionAttributeValues={":a": {"S": "203.0.113.9"}},
    )
    code, out = run_verify()
    assert code == 1 and out.startswith(f"{name} seq 1: hash mismatch")
    code, out = run_verify("--since", (clock.now().date() - timedelta(days=5)).isoformat())
    assert code == 0, out


def test_real_case_and_pledge_events_verify(ddb):
    """Events written by the live pledge and case paths verify and are digested."""
    from tests.reconciliation.factories import stuck_case, submit

    submit("verify-1")
    case = stuck_case("verify-2")
    report = audit_verify(since=clock.now().date())
    assert report.ok, report.problems
    assert report.streams >= 2
    written = audit_digest_write(repositories(), day=clock.now().date())
    heads = {h[0] for h in written["detail"]["heads"]}
    assert f"CASE#{case.case_id}" in heads and "PLEDGE#acme#verify-1" in heads
    assert audit_verify(since=clock.now().date()).ok
