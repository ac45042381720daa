"""The audit trail over two regions: a case's stream lives where its case id
says, a pledge's where it was written, so search, export, checkpoints and verification
read every region, each stream (and the item storing its head) in the region that owns
it, and keep from each region only its own streams, so a Global Tables replica never
doubles an event."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.audit.checkpoints import (
    Period,
    audit_checkpoint,
    checkpoint_period_s,
)
from reconciliation.audit.day_index import Cursor, CursorError
from reconciliation.audit.export.delivery import export_to_file, manifest_path_for
from reconciliation.audit.export.run import ExportAsk
from reconciliation.audit.export.verify import export_verify_offline
from reconciliation.audit.filters import AuditFilters, FilterAsk
from reconciliation.audit.models import SYSTEM_STREAM
from reconciliation.audit.repository import AuditRepository, event_hash
from reconciliation.audit.search import audit_search
from reconciliation.audit.verify import audit_verify
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo.batch import batch_writer
from reconciliation.dynamo.cancellation import Branch, _explain
from reconciliation.dynamo.client import home_region
from reconciliation.dynamo.items import from_item, to_item
from reconciliation.simulation.invariants import Snapshot, audit_problems, ledger_problems
from reconciliation.stores import Store, every_store, home_store, stream_tag
from tests.helpers import AS_SYSTEM, run_verify
from tests.reconciliation.factories import crashed_claim, submit

pytestmark = [
    pytest.mark.django_db(databases=[]),
    pytest.mark.dynamodb_local_only,
    pytest.mark.usefixtures("midday"),
]

CLI = Actor(username="cli:auditor", role=Role.SYSTEM)
TABLES = ("idempotency_keys", "pledges", "ledger", "cases", "audit_events")


def events_in(store: Store) -> list[dict]:
    """Every event stored in one region's table (replicas included)."""
    pages = store.client.get_paginator("scan").paginate(
        TableName=store.tables.audit_events, ConsistentRead=True
    )
    return [from_item(i) for page in pages for i in page.get("Items", [])]


def today() -> AuditFilters:
    return AuditFilters.build(FilterAsk(since=clock.now().date().isoformat()))


@pytest.fixture
def trail(two_regions) -> dict[str, list[dict]]:
    """Pledges and STUCK_PENDING cases homed in both regions, written the real way; the
    events each region holds, by region tag."""
    for n in range(10):
        assert submit(f"audit-geo-{n}").kind == OutcomeKind.CREATED
    with clock.travel(-200):
        for n in range(6):
            crashed_claim(f"audit-geo-stuck-{n}")
    assert len(sweep_all(every_store(), home=home_store).opened) == 6
    held = {store.tag: events_in(store) for store in every_store()}
    second = held["eu-west-1"]
    kinds = {e["stream"].split("#", 1)[0] for e in second}
    assert kinds == {"CASE", "PLEDGE"}, "both kinds of stream in the second region"
    assert all(stream_tag(e["stream"]) == "eu-west-1" for e in second)
    assert held[""], "and events in the first region"
    return held


def ids(events: list[dict]) -> list[str]:
    return [e["event_id"] for e in sorted(events, key=lambda e: e["at_id"], reverse=True)]


def replicate(src: Store, dst: Store) -> None:
    """What Global Tables would do: every item of ``src``'s tables copied into ``dst``'s."""
    for role in TABLES:
        table = getattr(src.tables, role)
        pages = src.client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
        with batch_writer(dst.client, getattr(dst.tables, role)) as writer:
            for page in pages:
                for item in page.get("Items", []):
                    writer.put_item(Item=item)


def search_all(page_size: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = audit_search(
            filters=today(), cursor=cursor, page_size=page_size, stores=every_store()
        )
        assert page.chains_ok, [c.line() for c in page.broken]
        seen.extend(r.event_id for r in page.rows)
        cursor = page.next_cursor
        if not cursor:
            return seen


def export_rows(tmp_path, name: str) -> tuple[list[dict], dict]:
    stores = every_store()
    out = tmp_path / name
    core = export_to_file(
        ExportAsk(today(), "jsonl", CLI, store=stores[0], stores=stores), out_path=out
    )
    assert export_verify_offline(out, manifest_path_for(out)) == []
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return rows, core


def test_search_lists_both_regions_events_once_newest_first(trail):
    """Paged by a cursor that spans both regions, search lists every event of both
    regions exactly once, newest first, each stream's chain checked where it lives."""
    expected = ids(trail[""] + trail["eu-west-1"])
    assert search_all(page_size=7) == expected
    assert search_all(page_size=500) == expected


def test_a_cursor_is_bound_to_its_regions_and_cannot_be_forged(trail):
    page = audit_search(filters=today(), page_size=5, stores=every_store(), with_chains=False)
    assert page.next_cursor
    cursor = Cursor.decode(page.next_cursor, today(), regions=("", "eu-west-1"))
    assert len(cursor.shards) == 16
    with pytest.raises(CursorError):  # a two-region cursor in a one-region search
        audit_search(filters=today(), cursor=page.next_cursor, store=AS_SYSTEM.store)
    short = Cursor(cursor.day, cursor.shards[:8], cursor.regions).encode(today())
    with pytest.raises(CursorError):
        audit_search(filters=today(), cursor=short, stores=every_store())
    renamed = Cursor(cursor.day, cursor.shards, ("", "ap-south-1")).encode(today())
    with pytest.raises(CursorError):
        audit_search(filters=today(), cursor=renamed, stores=every_store())


def test_export_has_every_event_of_both_regions_once(trail, tmp_path):
    """A JSON Lines export holds each event of both regions once, in time order; its
    manifest's chain heads name the second region's streams; the export's own event is
    written in the first region only."""
    everything = trail[""] + trail["eu-west-1"]
    rows, core = export_rows(tmp_path, "both.jsonl")
    assert [r["event_id"] for r in rows] == ids(everything)[::-1]
    assert core["row_count"] == len(everything)
    assert core["chain_heads_count"] == len({e["stream"] for e in everything})
    stream = f"EXPORT#{core['export_id']}"
    first, second = every_store()
    assert [e["action"] for e in AuditRepository(first).stream_events(stream)] == [
        "export_completed"
    ]
    assert AuditRepository(second).stream_events(stream) == []


def test_verify_audit_covers_the_second_region_and_names_its_broken_link(trail):
    """verify_audit checks both regions' streams against the items storing their heads
    (a second-region pledge's item is in the second region), then names an event edited
    in the second region by its stream and seq."""
    streams = {e["stream"] for e in trail[""] + trail["eu-west-1"]}
    events = len(trail[""]) + len(trail["eu-west-1"])
    assert run_verify() == (
        0,
        [f"OK since {clock.now().date()}: {len(streams)} streams, {events} events, 0 checkpoints"],
    )
    second = every_store()[1]
    victim = next(e for e in trail["eu-west-1"] if e["stream"].startswith("CASE#"))
    edited = {**victim, "reason_text": "edited in place"}
    second.client.put_item(TableName=second.tables.audit_events, Item=to_item(edited))
    line = (
        f"{victim['stream']} seq {victim['seq']}: hash mismatch: expected "
        f"{event_hash(edited)} stored {victim['hash']}"
    )
    assert run_verify() == (1, [line])
    assert run_verify("--stream", victim["stream"]) == (1, [line])


def test_a_second_region_pledge_truncated_is_named_by_its_stored_head(trail):
    """A second-region pledge's receipt deleted is named through the pledge item in its
    own region, which still stores audit_seq 1."""
    second = every_store()[1]
    receipt = next(e for e in trail["eu-west-1"] if e["stream"].startswith("PLEDGE#"))
    stream = receipt["stream"]
    assert stream.startswith("PLEDGE#@eu-west-1#")
    report = audit_verify(stream=stream, store=AS_SYSTEM.store, stores=every_store())
    assert report.ok, report.problems
    second.client.delete_item(
        TableName=second.tables.audit_events,
        Key={"stream": {"S": stream}, "seq": {"N": "1"}},
    )
    report = audit_verify(stream=stream, store=AS_SYSTEM.store, stores=every_store())
    assert report.problems == [
        f"{stream}: the pledge item stores audit_seq 1 but the stream has no events "
        f"(audit_head {receipt['hash']})"
    ]


def test_replicas_in_every_region_double_nothing(trail, tmp_path):
    """With every item copied into the other region (Global Tables caught up), search,
    export and verification still see each event once."""
    first, second = every_store()
    replicate(first, second)
    replicate(second, first)
    everything = trail[""] + trail["eu-west-1"]
    assert len(events_in(first)) == len(events_in(second)) == len(everything)
    report = audit_verify(since=clock.now().date(), store=AS_SYSTEM.store, stores=every_store())
    assert report.ok, report.problems
    streams = {e["stream"] for e in everything}
    assert (report.streams, report.events) == (len(streams), len(everything))
    assert search_all(page_size=9) == ids(everything)
    rows, core = export_rows(tmp_path, "replicated.jsonl")
    assert core["row_count"] == len(everything)
    assert [r["event_id"] for r in rows] == ids(everything)[::-1]


def test_one_checkpoint_a_period_covers_both_regions(trail):
    """The checkpoint task lists the heads of both regions' streams in the first
    region's SYSTEM stream, and verification checks them against each region."""
    first, second = every_store()
    # From the period of the first event, which is still open: nothing is due yet.
    written = audit_checkpoint(first, stores=every_store())
    with clock.travel(3600 * 13):  # today's periods are over too
        written += audit_checkpoint(first, stores=every_store())
        assert written
        system = AuditRepository(first).stream_events(SYSTEM_STREAM)
        listed = {h[0] for e in system for h in (e.get("detail") or {}).get("heads", [])}
        assert {e["stream"] for e in trail["eu-west-1"]} <= listed
        assert AuditRepository(second).stream_events(SYSTEM_STREAM) == []
        report = audit_verify(store=first, stores=every_store())
        assert report.ok, report.problems
        victim = next(e for e in trail["eu-west-1"] if e["stream"].startswith("PLEDGE#"))
        second.client.delete_item(
            TableName=second.tables.audit_events,
            Key={"stream": {"S": victim["stream"]}, "seq": {"N": str(victim["seq"])}},
        )
        problems = audit_verify(store=first, stores=every_store()).problems
        assert any(
            f"stream {victim['stream']} seq {victim['seq']} missing" in p for p in problems
        ), problems


def test_invariants_find_each_regions_pledge_streams(trail):
    """The at-rest invariants, over either region's tables, find a pledge's receipt in
    the stream its ledger shard's region names."""
    for store in every_store():
        snapshot = Snapshot.scan(store.client, store.tables)
        assert ledger_problems(snapshot) == []
        assert audit_problems(snapshot) == []


def test_a_tagged_pledge_receipt_that_exists_reads_as_a_duplicate():
    """A refused receipt of a pledge stream of the second region is the pledge recorded
    before, as it is in the first region."""
    for stream in ("PLEDGE#acme#k1", "PLEDGE#@eu-west-1#acme#k1"):
        _, kind = _explain("audit_events", "ConditionalCheckFailed", None, {"stream": stream})
        assert kind == Branch.DUPLICATE


def test_the_default_range_reaches_a_day_only_the_second_region_holds(trail):
    """Yesterday's only event, a pledge of a key homed in the second region, extends
    verification's default range back to yesterday: its stream is verified and its
    period, which has no checkpoint, is named; once checkpointed, all holds."""
    key = next(
        f"audit-geo-yesterday-{n}"
        for n in range(100)
        if home_region(claim_pk("acme", OPERATION_CREATE_PLEDGE, f"audit-geo-yesterday-{n}")).tag
    )
    with clock.travel(-86400):
        outcome = submit(key)
    assert outcome.kind == OutcomeKind.CREATED
    report = audit_verify(store=AS_SYSTEM.store, stores=every_store())
    period = Period.containing(clock.now() - timedelta(days=1), checkpoint_period_s())
    assert report.problems == [f"missing signed checkpoint for {period.label}"]
    assert report.since == clock.now().date() - timedelta(days=1)
    streams = {e["stream"] for e in trail[""] + trail["eu-west-1"]}
    assert report.streams == len(streams) + 1
    assert audit_checkpoint(AS_SYSTEM.store, stores=every_store())
    assert audit_verify(store=AS_SYSTEM.store, stores=every_store()).ok
