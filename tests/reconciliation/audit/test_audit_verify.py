"""Chain verification, the signed checkpoints and ``manage.py verify_audit``: tampering
with one field, deleting one event and deleting a whole stream are each named; daily
digests written before checkpoints still verify."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from bench.audit_synthetic import synthetic_events
from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.audit.chains import subject_of
from reconciliation.audit.checkpoints import (
    Period,
    audit_checkpoint,
    audit_checkpoint_write,
    digest_payload,
)
from reconciliation.audit.models import SYSTEM_STREAM, AuditAction, AuditEvent
from reconciliation.audit.periods import audit_period_heads
from reconciliation.audit.repository import audit_event_build, event_hash
from reconciliation.audit.signing import heads_sha256, key_id, sign
from reconciliation.audit.tasks import audit_checkpoint as checkpoint_task
from reconciliation.audit.verify import audit_verify
from reconciliation.dynamo.items import to_item
from tests.helpers import AS_SYSTEM, audit_events, audit_seed, race, repositories, run_verify

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("midday")]


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


def first_period(events: list[dict]) -> str:
    """The label of the hour holding the earliest of ``events``: the first checkpoint's."""
    first = min(clock.parse_iso(e["at"]) for e in events)
    return Period.containing(first, 3600).label


def seed(total: int = 80, *, day=None, tag: str = "") -> list[dict]:
    """``total`` chained events dated ``day`` (default yesterday) and their subjects'
    items, bulk-loaded."""
    day = day or yesterday()
    events = audit_seed(total, days=1, start=datetime.combine(day, time.min, tzinfo=UTC), tag=tag)
    put_subjects(repositories(), events)
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


def run_verify_text(*args: str) -> tuple[int, str]:
    code, lines = run_verify(*args)
    return code, "\n".join(lines)


def no_scans(ddb) -> list[str]:
    """Record every Scan the client sends (verification must use Queries only)."""
    seen: list[str] = []
    ddb.client.meta.events.register("before-call.dynamodb.Scan", lambda **kw: seen.append("x"))
    return seen


def checkpoints(ddb) -> list[dict]:
    return [
        e for e in audit_events(ddb, SYSTEM_STREAM) if e["action"] == AuditAction.AUDIT_CHECKPOINT
    ]


def listing(ddb, stream: str) -> list[tuple[dict, list]]:
    """Each checkpoint that lists ``stream``, with the head it lists."""
    return [
        (c, head)
        for c in checkpoints(ddb)
        for head in c["detail"].get("heads", [])
        if head[0] == stream
    ]


def label(checkpoint: dict) -> str:
    start = clock.parse_iso(checkpoint["detail"]["start"])
    return Period(start, start + timedelta(hours=1)).label


def test_intact_trail_verifies_with_queries_only(ddb):
    """A seeded trail and its checkpoints verify: exit 0, every stream counted, no Scan."""
    events = seed(80)
    written = audit_checkpoint(store=AS_SYSTEM.store)
    assert len(written) >= 23 and written[0] == first_period(events)
    scans = no_scans(ddb)
    code, out = run_verify_text()
    streams = {e["stream"] for e in events}
    assert code == 0, out
    assert out.startswith("OK since ")
    assert (
        f"{len(streams) + 1} streams, {len(events) + len(written)} events, "
        f"{len(written)} checkpoints"
    ) in out
    assert scans == []


def test_changed_field_names_the_stream_and_seq(ddb):
    """Editing one stored field in DynamoDB: verification names that stream and seq with
    the recomputed and the stored hash, and the command exits non-zero."""
    name, chain = longest_stream(seed(80))
    audit_checkpoint(store=AS_SYSTEM.store)
    victim = chain[1]
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": name}, "seq": {"N": "2"}},
        UpdateExpression="SET reason_text = :t",
        ExpressionAttributeValues={":t": {"S": "nothing to see here"}},
    )
    expected = event_hash({**victim, "reason_text": "nothing to see here"})
    code, out = run_verify_text()
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
    code, out = run_verify_text("--stream", name)
    assert code == 1
    assert out.splitlines() == [f"{name} seq 2: gap: seq 2 missing (next stored seq 3)"]


def test_deleting_a_whole_stream_fails_its_periods_checkpoints(ddb):
    """A stream deleted outright, its subject item with it, leaves no broken chain and
    no stored head behind, but each signed checkpoint of a period it had events in lists
    its head there, so verification names every missing head."""
    events = seed(80)
    audit_checkpoint(store=AS_SYSTEM.store)
    name, chain = longest_stream(events)
    for event in chain:
        ddb.client.delete_item(
            TableName=ddb.tables.audit_events,
            Key={"stream": {"S": name}, "seq": {"N": str(event["seq"])}},
        )
    delete_subject(ddb, name)
    report = audit_verify(store=AS_SYSTEM.store)
    listed = listing(ddb, name)
    assert listed and listed[-1][1] == [name, chain[-1]["seq"], chain[-1]["hash"]]
    assert report.problems == [
        f"checkpoint {label(c)} (SYSTEM seq {c['seq']}): stream {name} seq {seq} missing: "
        f"expected hash {digest}"
        for c, (_, seq, digest) in listed
    ]


def test_rehashed_tail_is_caught_by_the_signed_checkpoint(ddb):
    """Rewriting a stream's last event *and* its hash, and the head its subject item
    stores, keeps the chain and the item consistent; only the signed checkpoint, which
    the writer cannot re-sign, exposes it."""
    events = seed(80)
    audit_checkpoint(store=AS_SYSTEM.store)
    name, chain = longest_stream(events)
    forged = {**chain[-1], "reason_text": "rewritten"}
    forged["hash"] = event_hash(forged)
    ddb.client.put_item(TableName=ddb.tables.audit_events, Item=to_item(forged))
    put_subjects(ddb, [forged])
    report = audit_verify(store=AS_SYSTEM.store)
    assert len(report.problems) == 1
    assert report.problems[0].endswith(
        f"stream {name} seq {forged['seq']}: expected hash {chain[-1]['hash']} "
        f"stored {forged['hash']}"
    )


def test_re_signed_checkpoint_without_the_key_fails_its_signature(ddb):
    """A checkpoint rewritten to drop a head, with its SHA-256 recomputed and the rest of
    SYSTEM re-chained after it, still carries the old signature: verification says the
    signature does not verify, and nothing else."""
    seed(30)
    audit_checkpoint(store=AS_SYSTEM.store)
    system = audit_events(ddb, SYSTEM_STREAM)
    n, victim = next((n, e) for n, e in enumerate(system) if e["detail"].get("heads"))
    detail = dict(victim["detail"])
    detail["heads"] = detail["heads"][1:]
    detail["stream_count"], detail["heads_sha256"] = heads_sha256(detail["heads"])
    forged = {**victim, "detail": detail}
    previous = None
    for event in [forged, *system[n + 1 :]]:
        event = {**event, "prev_hash": previous["hash"]} if previous else event
        event["hash"] = event_hash(event)
        ddb.client.put_item(TableName=ddb.tables.audit_events, Item=to_item(event))
        previous = event
    report = audit_verify(store=AS_SYSTEM.store)
    assert report.problems == [
        f"checkpoint {label(victim)} (SYSTEM seq {victim['seq']}): signature does not verify"
    ]


def test_checkpoint_is_written_once_per_period(ddb):
    """The task writes every finished period's checkpoint on its first run (from the
    period of the first event) and nothing after; two periods later it writes exactly
    those two, empty periods included."""
    events = seed(20)
    first = checkpoint_task()
    assert first[0] == first_period(events)
    assert checkpoint_task() == []
    written = checkpoints(ddb)
    assert [label(c) for c in written] == first
    assert sum(c["detail"]["stream_count"] for c in written[:24]) >= len(
        {e["stream"] for e in events}
    )
    assert "AUDIT_SIGNING_KEY" not in str(written[0]) and "signature" in written[0]["detail"]
    with clock.travel(2 * 3600):
        later = checkpoint_task()
        last = clock.parse_iso(written[-1]["detail"]["end"])
        assert later == [Period.containing(last + timedelta(hours=h), 3600).label for h in (0, 1)]
        assert checkpoint_task() == []
        assert audit_verify(store=AS_SYSTEM.store).ok


@pytest.mark.dynamodb_local_only  # a race: moto's in-process backend is not thread-safe
def test_concurrent_checkpoint_writers_write_one_checkpoint(ddb):
    """Four writers race for the same period at a barrier: the SYSTEM stream stays one
    chain and holds exactly one checkpoint for the period."""
    seed(20)
    period = Period.containing(clock.now() - timedelta(hours=1), 3600)

    def write() -> None:
        audit_checkpoint_write(repositories(), period=period)

    outcomes = race(*[write] * 4)
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert errors == []
    system = audit_events(ddb, SYSTEM_STREAM)
    assert [e["action"] for e in system] == [AuditAction.AUDIT_CHECKPOINT]
    assert audit_verify(stream=SYSTEM_STREAM, store=AS_SYSTEM.store).ok


@pytest.mark.dynamodb_local_only  # a race: moto's in-process backend is not thread-safe
def test_concurrent_checkpoint_runs_write_one_checkpoint_a_period(ddb):
    """Four runs of the task, each with every period since yesterday's midnight due,
    race at a barrier: each run trusts what it read of SYSTEM only while nobody else
    has appended (``_SystemSeen``), so every period still gets exactly one checkpoint,
    in one chain."""
    seed(20)
    outcomes = race(*[lambda: audit_checkpoint(AS_SYSTEM.store)] * 4)
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    written = [label for run in outcomes for label in run]
    system = audit_events(ddb, SYSTEM_STREAM)
    starts = [e["detail"]["start"] for e in system if e["action"] == AuditAction.AUDIT_CHECKPOINT]
    assert len(starts) == len(set(starts)) == len(written) > 24
    assert audit_verify(stream=SYSTEM_STREAM, store=AS_SYSTEM.store).ok


def test_a_run_over_many_periods_reads_the_newest_checkpoint_once(ddb, monkeypatch):
    """The task's first run signs every period since yesterday's midnight; it reads the
    newest checkpoint once at its start, not twice a period (each such read walks back
    through SYSTEM from its head)."""
    from reconciliation.audit.repository import AuditRepository

    seed(20)
    reads = []
    real = AuditRepository.latest_event

    def counted(self, stream, *, action):
        reads.append(stream)
        return real(self, stream, action=action)

    monkeypatch.setattr(AuditRepository, "latest_event", counted)
    written = audit_checkpoint(AS_SYSTEM.store)
    assert len(written) > 24 and reads == [SYSTEM_STREAM]
    reads.clear()
    assert audit_checkpoint(AS_SYSTEM.store) == [] and reads == [SYSTEM_STREAM]


def test_large_period_spills_into_parts_and_a_deleted_part_is_named(ddb, monkeypatch, settings):
    """A period with more heads than fit one item is checkpointed in part events that the
    signed checkpoint lists; it verifies, and deleting a part is reported. (Daily
    periods, and the per-item limit lowered to 25 heads, so the test stays small.)"""
    settings.AUDIT_CHECKPOINT_PERIOD_S = 86400
    monkeypatch.setattr("reconciliation.audit.checkpoints.CHECKPOINT_INLINE_HEADS", 25)
    repos = repositories()
    day = yesterday()
    events = list(
        synthetic_events(150, start=datetime.combine(day, time.min, tzinfo=UTC), tag="big")
    )
    repos.audit.batch_put(events)
    put_subjects(repos, events)
    assert audit_checkpoint(store=AS_SYSTEM.store) == [day.isoformat() + "T00:00Z"]
    [checkpoint] = checkpoints(ddb)
    streams = len({e["stream"] for e in events})
    assert streams > 25 and checkpoint["detail"]["stream_count"] == streams
    assert "heads" not in checkpoint["detail"] and len(checkpoint["detail"]["parts"]) >= 2
    assert audit_verify(since=day, store=AS_SYSTEM.store).ok
    part_seq = checkpoint["detail"]["parts"][0][0]
    part = repos.audit.event_at(SYSTEM_STREAM, part_seq)
    assert part["action"] == AuditAction.AUDIT_CHECKPOINT_PART
    ddb.client.delete_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": SYSTEM_STREAM}, "seq": {"N": str(part_seq)}},
    )
    problems = audit_verify(since=day, store=AS_SYSTEM.store).problems
    assert f"part SYSTEM seq {part_seq} missing or changed" in "\n".join(problems)


def legacy_digest(repos, day) -> dict:
    """The daily digest of ``day`` as written before checkpoints (inline heads)."""
    start = datetime.combine(day, time.min, tzinfo=UTC)
    heads = audit_period_heads(start, start + timedelta(days=1), store=repos)
    count, sha = heads_sha256(heads)
    kid = key_id()
    head = repos.audit.head(SYSTEM_STREAM)
    event = audit_event_build(
        AuditEvent(
            action=AuditAction.AUDIT_DIGEST,
            actor=system_actor(),
            detail={
                "day": day.isoformat(),
                "stream_count": count,
                "heads_sha256": sha,
                "key_id": kid,
                "signature": sign(digest_payload(day.isoformat(), count, sha, kid)),
                "algorithm": "HMAC-SHA256",
                "heads": [list(h) for h in heads],
            },
        ),
        stream=SYSTEM_STREAM,
        seq=head.seq + 1 if head else 1,
        prev_hash=head.hash if head else "0" * 64,
    )
    assert repos.audit.append(event)
    return event


def test_legacy_daily_digest_still_verifies_and_checkpoints_continue_after_it(ddb):
    """A daily digest written before checkpoints is verified with its own payload and
    covers its day; the first checkpoint run continues at the next midnight, and a
    stream the digest lists, once deleted, is named against the digest."""
    repos = repositories()
    events = seed(40)
    digest = legacy_digest(repos, yesterday())
    written = audit_checkpoint(store=AS_SYSTEM.store)
    assert written[0] == f"{clock.now().date().isoformat()}T00:00Z" or written == []
    report = audit_verify(store=AS_SYSTEM.store)
    assert report.ok, report.problems
    assert report.checkpoints == 1 + len(written)
    name, chain = longest_stream(events)
    for event in chain:
        ddb.client.delete_item(
            TableName=ddb.tables.audit_events,
            Key={"stream": {"S": name}, "seq": {"N": str(event["seq"])}},
        )
    delete_subject(ddb, name)
    head = chain[-1]
    assert audit_verify(store=AS_SYSTEM.store).problems == [
        f"digest {yesterday().isoformat()} (SYSTEM seq {digest['seq']}): stream {name} "
        f"seq {head['seq']} missing: expected hash {head['hash']}"
    ]


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
    code, out = run_verify_text()
    assert code == 1 and out.startswith(f"{name} seq 1: hash mismatch")
    code, out = run_verify_text("--since", (clock.now().date() - timedelta(days=5)).isoformat())
    assert code == 0, out


def test_real_case_and_pledge_events_verify(ddb):
    """Events written by the live pledge and case paths verify and are checkpointed."""
    from tests.reconciliation.factories import stuck_case, submit

    submit("verify-1")
    case = stuck_case("verify-2")
    report = audit_verify(since=clock.now().date(), store=AS_SYSTEM.store)
    assert report.ok, report.problems
    assert report.streams >= 2
    period = Period.containing(clock.now(), 3600)
    written = audit_checkpoint_write(repositories(), period=period)
    heads = {h[0] for h in written["detail"]["heads"]}
    assert f"CASE#{case.case_id}" in heads and "PLEDGE#acme#verify-1" in heads
    assert audit_verify(since=clock.now().date(), store=AS_SYSTEM.store).ok


def _delete_stream(ddb, stream: str) -> None:
    for event in audit_events(ddb, stream):
        ddb.client.delete_item(
            TableName=ddb.tables.audit_events,
            Key={"stream": {"S": stream}, "seq": {"N": str(event["seq"])}},
        )


def test_a_fresh_cases_only_event_deleted_is_named_by_its_case_item(ddb):
    """A stuck-claim case just opened (one event, no checkpoint yet): its event deleted,
    verification still finds the case through the case table and names it, because the
    case item stores audit_seq 1: with its only event gone, the trail alone would not
    show the case ever had one."""
    from tests.reconciliation.factories import stuck_case

    case = stuck_case("fresh-1")
    stream = f"CASE#{case.case_id}"
    assert [e["seq"] for e in audit_events(ddb, stream)] == [1]
    _delete_stream(ddb, stream)
    code, out = run_verify("--since", clock.now().date().isoformat())
    assert code == 1, out
    named = f"{stream}: the case item stores audit_seq 1 but the stream has no events"
    assert any(line.startswith(named) for line in out), out


def test_a_pledge_stream_deleted_before_its_checkpoint_is_named(ddb):
    """A pledge recorded and no checkpoint yet lists its stream: its receipt deleted,
    verification finds the pledge through the pledge table and names it."""
    from tests.reconciliation.factories import submit

    submit("fresh-2")
    stream = "PLEDGE#acme#fresh-2"
    assert [e["seq"] for e in audit_events(ddb, stream)] == [1]
    _delete_stream(ddb, stream)
    code, out = run_verify("--since", clock.now().date().isoformat())
    assert code == 1, out
    named = f"{stream}: the pledge item stores audit_seq 1 but the stream has no events"
    assert any(line.startswith(named) for line in out), out
