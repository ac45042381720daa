"""What the ``by_day`` index says about a period or a range of days, keys only: the
heads of the streams in a checkpoint period, whether a day holds any event, and the
streams, referenced pledges and periods of a range (for verification).

Each takes the stores of every region (or one ``store``) and reads each region's index
in that region, keeping only the streams it owns (:mod:`.regions`): a replica of another
region's event is that region's to report.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from reconciliation import clock
from reconciliation.audit.regions import case_pledge_stream, owned_by, pledge_item_stream
from reconciliation.audit.repository import AuditRepository, DaySelection
from reconciliation.dynamo.index_rows import IncompleteRow, complete_rows, incomplete
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS, SUBJECT_DAY_SHARDS
from reconciliation.stores import Store


def _shard_items(
    store: Store, day_shard: str, projection: str, names: dict[str, str]
) -> Iterator[dict[str, Any]]:
    """Every item of one ``by_day`` shard, oldest first, only the projected attributes."""
    after = None
    while True:
        items, lek = AuditRepository(store).day_page(
            day_shard, after=after, select=DaySelection(names=names, projection=projection)
        )
        yield from items
        if lek is None:
            return
        after = lek["at_id"]["S"]


def _sources(store: Store | None, stores: Sequence[Store] | None) -> list[Store]:
    sources = list(stores) if stores else [store] if store else []
    if not sources:
        raise ValueError("a store or stores is needed")
    return sources


class PeriodUnsettled(Exception):
    """The ``by_day`` index showed rows of the period without their attributes yet (items
    mid-write): heads read now would leave those events out, so the period is read again
    on the next run rather than signed without them."""

    def __init__(self, rows: list[IncompleteRow]):
        super().__init__(f"{len(rows)} index rows without their attributes yet")
        self.rows = rows


def audit_period_heads(
    start: datetime,
    end: datetime,
    *,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
) -> list[tuple[str, int, str]]:
    """``(stream, seq, hash)`` of the last event dated in ``[start, end)`` of every stream
    with one, sorted by stream: eight Queries (and their pages) per region over the
    ``by_day`` shards of that day, bounded to the period, keys and hash only. The period
    lies within one UTC day. :class:`PeriodUnsettled` when a row lacks one of them."""
    # at_id is "{at}#{event_id}": every at_id of an event at or after ``end`` sorts
    # after the bare timestamp, so ``hi`` is exclusive of them.
    lo, hi = clock.iso(start), clock.iso(end)
    heads: dict[str, tuple[int, str]] = {}
    names = {"#s": "stream", "#q": "seq", "#h": "hash"}
    unsettled: list[IncompleteRow] = []
    sources = _sources(store, stores)
    for source in sources:
        owns = owned_by(source, sources)
        for n in range(AUDIT_DAY_SHARDS):
            shard = f"{start.date().isoformat()}#{n}"
            for item in AuditRepository(source).period_items(
                shard, lo, hi, projection="#s, #q, #h", names=names
            ):
                shortfall = incomplete(item, ("stream", "seq", "hash"), index="audit by_day")
                if shortfall is not None:
                    unsettled.append(shortfall)
                    continue
                stream, seq = item["stream"]["S"], int(item["seq"]["N"])
                if owns(stream) and seq > heads.get(stream, (0, ""))[0]:
                    heads[stream] = (seq, item["hash"]["S"])
    if unsettled:
        raise PeriodUnsettled(unsettled)
    return [(s, q, h) for s, (q, h) in sorted(heads.items())]


def audit_first_event_at(
    days: Sequence[date], *, store: Store | None = None, stores: Sequence[Store] | None = None
) -> datetime | None:
    """The time of the earliest event dated on the first of ``days`` that has one (up to
    eight one-item Queries a region and day, oldest first), or ``None``."""
    for day in sorted(days):
        times = []
        for source in _sources(store, stores):
            for n in range(AUDIT_DAY_SHARDS):
                items, _ = AuditRepository(source).day_page(
                    f"{day.isoformat()}#{n}", limit=1, select=DaySelection(projection="at_id")
                )
                times += [item["at_id"]["S"].split("#", 1)[0] for item in items]
        if times:
            return clock.parse_iso(min(times))
    return None


def audit_day_has_events(
    day: date, *, store: Store | None = None, stores: Sequence[Store] | None = None
) -> bool:
    """Whether any event is dated ``day``: up to eight one-item Queries a region (a
    replica counts: its event exists in its own region too)."""
    for source in _sources(store, stores):
        for n in range(AUDIT_DAY_SHARDS):
            items, _ = AuditRepository(source).day_page(
                f"{day.isoformat()}#{n}", limit=1, select=DaySelection(projection="at_id")
            )
            if items:
                return True
    return False


@dataclass
class RangeIndex:
    """What the ``by_day`` index says about a range of days: the streams with events in
    it, the pledges its case events name (``intent_id``), and the start of every
    checkpoint period holding an event."""

    streams: set[str] = field(default_factory=set)
    referenced: set[str] = field(default_factory=set)  # PLEDGE#… streams, tagged as due
    periods: set[datetime] = field(default_factory=set)


def audit_range_index(
    days: list[date],
    *,
    period_s: int = 86400,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
    threads: int = 8,
) -> RangeIndex:
    """Every stream with an event on one of ``days``, every pledge stream a case event of
    those days names (in the case's region), and every period of ``period_s`` seconds
    (aligned to midnight) with an event (Queries over ``by_day`` in every region, three
    attributes, no Scan)."""
    names = {"#s": "stream", "#i": "intent_id"}
    sources = _sources(store, stores)

    def one(job: tuple[Store, str]) -> RangeIndex:
        source, day_shard = job
        owns = owned_by(source, sources)
        found = RangeIndex()
        offsets: set[int] = set()
        rows = _shard_items(source, day_shard, "#s, #i, at_id", names)
        for item in complete_rows(rows, ("stream", "at_id"), index="audit by_day"):
            stream = item["stream"]["S"]
            if not owns(stream):
                continue
            found.streams.add(stream)
            if stream.startswith("CASE#") and "intent_id" in item:
                found.referenced.add(case_pledge_stream(stream, item["intent_id"]["S"]))
            at = item["at_id"]["S"]  # YYYY-MM-DDTHH:MM:SS.ffffffZ#…, sliced, not parsed
            second = int(at[11:13]) * 3600 + int(at[14:16]) * 60 + int(at[17:19])
            offsets.add(second - second % period_s)
        midnight = datetime.combine(date.fromisoformat(day_shard[:10]), time.min, tzinfo=UTC)
        found.periods = {midnight + timedelta(seconds=o) for o in offsets}
        return found

    keys = [
        (source, f"{d.isoformat()}#{n}")
        for source in sources
        for d in days
        for n in range(AUDIT_DAY_SHARDS)
    ]
    index = RangeIndex()
    with ThreadPoolExecutor(threads) as pool:
        for found in pool.map(one, keys):
            index.streams |= found.streams
            index.referenced |= found.referenced
            index.periods |= found.periods
    return index


def subjects_written(
    days: list[date],
    *,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
    threads: int = 8,
) -> set[str]:
    """The streams of every case opened and every pledge written on one of ``days``,
    found through the subject tables' own ``by_day`` indexes (keys only), in the region
    that owns each: a subject whose every event is gone has no entry in the audit index,
    but its item still stores the head its stream must reach."""
    sources = _sources(store, stores)

    def one(job: tuple[Store, str, str]) -> set[str]:
        source, kind, day_shard = job
        owns = owned_by(source, sources)
        table = source.tables.cases if kind == "case" else source.tables.pledges
        found: set[str] = set()
        pages = source.client.get_paginator("query").paginate(
            TableName=table,
            IndexName="by_day",
            KeyConditionExpression="day_shard = :d",
            ExpressionAttributeValues={":d": {"S": day_shard}},
        )
        needed = ("case_id",) if kind == "case" else ("intent_id",)
        for page in pages:
            for item in complete_rows(page.get("Items", []), needed, index=f"{kind}s by_day"):
                if kind == "case":
                    stream = f"CASE#{item['case_id']['S']}"
                else:
                    ledger_key = item.get("ledger_key", {}).get("S", "")
                    stream = pledge_item_stream(
                        {"intent_id": item["intent_id"]["S"], "ledger_key": ledger_key}
                    )
                if owns(stream):
                    found.add(stream)
        return found

    jobs = [
        (source, kind, f"{d.isoformat()}#{n}")
        for source in sources
        for kind in ("case", "pledge")
        for d in days
        for n in range(SUBJECT_DAY_SHARDS)
    ]
    streams: set[str] = set()
    with ThreadPoolExecutor(threads) as pool:
        for found in pool.map(one, jobs):
            streams |= found
    return streams
