"""Case listings over every region (docs/design.md §2, docs/regions.md): each region is read
on its own and the pages merged, so a case homed in any region is listed exactly once.

Global Tables copy every case to every region, so a region's indexes also hold replicas
of other regions' cases: from each region a reader keeps only the rows whose case id
names that region (:func:`owned`), and the result is complete and never doubled whether
or not replication runs.

A merged page reads each region with the page's ``Limit``, merges the rows by the
order's sort key and keeps the first ``Limit``. Its cursor holds one position per region
(the key of the last row taken from it, or that region's LastEvaluatedKey when the page
took all it read), always a key that region itself returned, so every region resumes
exactly where its rows stopped. With one region the page is the region's own page and
its cursor the one-region cursor: same Queries, same cost.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reconciliation.cases.counters import QueueCounter
from reconciliation.cases.repository import CaseRepository, CountersAnd
from reconciliation.cases.vocabulary import QUEUES, Queue
from reconciliation.dynamo.items import RawItem, from_item, to_item
from reconciliation.stores import Store, case_tag

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

SortKey = tuple[Any, ...]


class CursorMismatch(ValueError):
    """A cursor's positions do not fit the configured regions."""


def stores_of(store: Store | None, stores: Sequence[Store] | None) -> list[Store]:
    """The regions a reader reads: ``stores`` (the edge's ``every_store()``), or the one
    ``store`` a caller resolved."""
    chosen = list(stores or ([store] if store is not None else []))
    if not chosen:
        raise TypeError("pass store= or stores=")
    return chosen


def owned(rows: Iterable[dict[str, Any]], store: Store) -> list[dict[str, Any]]:
    """The rows of cases living in ``store``'s region (not replicas of other regions')."""
    return [row for row in rows if case_tag(row["case_id"]) == store.tag]


def merged_counters(stores: Sequence[Store]) -> dict[str, QueueCounter]:
    """Each region's own counter items (one BatchGetItem each), summed per queue."""
    return merged_counters_and(stores).counters


def merged_counters_and(stores: Sequence[Store], *ids: str) -> CountersAnd:
    """:func:`merged_counters`, and the items ``ids`` of the first region's cases table
    read in its BatchGetItem (no call more)."""
    read = CaseRepository(stores[0]).counters_and(*ids)
    first = read.counters
    if len(stores) == 1:
        return read
    out: dict[str, QueueCounter] = {queue: QueueCounter() for queue in QUEUES}
    for n, store in enumerate(stores):
        counters = first if n == 0 else CaseRepository(store).counters()
        for queue, counter in counters.items():
            out.setdefault(queue, QueueCounter()).merge(counter)
    return CountersAnd(out, read.items)


def open_count(
    stores: Sequence[Store],
    queue: Queue,
    *,
    before: str | None = None,
    after: str | None = None,
    without_tenant: str = "",
) -> int:
    """Open cases of ``queue`` opened in ``[after, before)`` over every region: one
    region asks ``count_range`` as ever; several count only the cases each owns (a
    filter that leaves out replicas); ``without_tenant``'s cases (the drill's) are not
    counted."""
    owned_only = len(stores) > 1
    return sum(
        CaseRepository(s).count_range(
            queue,
            before=before,
            after=after,
            owned_only=owned_only,
            without_tenant=without_tenant,
        )
        for s in stores
    )


# --- merged pages -----------------------------------------------------------------------


@dataclass
class Run:
    """What one region's reads for one page returned: its owned rows in index order and
    where its reading stopped (``last_key`` is ``None`` once the region is read to its
    end; ``frontier`` is how far it was read, in sort-key terms, when it is not)."""

    store: Store
    start: Any
    rows: list[dict[str, Any]] = field(default_factory=list)
    last_key: Any = None
    frontier: SortKey | None = None
    units: float = 0.0
    queries: int = 0


@dataclass(frozen=True)
class Merged:
    rows: list[tuple[Store, dict[str, Any]]]
    # Per region tag: where its next page starts (``None``: from its beginning); a region
    # read to its end has no entry. Empty when every region is done.
    positions: dict[str, Any]
    units: float
    queries: int


def merge_runs(
    runs: Sequence[Run],
    *,
    limit: int,
    sort_key: Callable[[dict[str, Any]], SortKey],
    descending: bool,
    position_of: Callable[[Run, dict[str, Any]], Any],
) -> Merged:
    """The first ``limit`` rows of every region's run in the order's sort key (ties in
    region order), never past what a region with more to read has read (its
    ``frontier``: a row strictly beyond it might come after rows that region has not
    returned yet; a row equal to it may go first, since ties have no order)."""
    bound: SortKey | None = None
    for run in runs:
        if run.last_key is not None and run.frontier is not None:
            if bound is None:
                bound = run.frontier
            else:
                bound = max(bound, run.frontier) if descending else min(bound, run.frontier)
    streams = [[(sort_key(row), n, row) for row in run.rows] for n, run in enumerate(runs)]
    taken = [0] * len(runs)
    rows: list[tuple[Store, dict[str, Any]]] = []
    for key, n, row in heapq.merge(*streams, key=lambda t: t[0], reverse=descending):
        if len(rows) >= limit:
            break
        if bound is not None and (key < bound if descending else key > bound):
            break
        rows.append((runs[n].store, row))
        taken[n] += 1
    positions: dict[str, Any] = {}
    for n, run in enumerate(runs):
        if taken[n] == len(run.rows):
            if run.last_key is not None:
                positions[run.store.tag] = run.last_key
        else:
            positions[run.store.tag] = (
                position_of(run, run.rows[taken[n] - 1]) if taken[n] else run.start
            )
    return Merged(
        rows,
        positions,
        sum(r.units for r in runs),
        sum(r.queries for r in runs),
    )


def index_key(row: dict[str, Any], *attributes: str) -> dict[str, AttributeValueTypeDef]:
    """An ExclusiveStartKey at ``row`` in an index keyed by ``attributes`` (plus the
    table's ``case_id``)."""
    return to_item({name: row[name] for name in ("case_id", *attributes)})


def plain(key: RawItem) -> dict[str, Any]:
    return from_item(key)


# --- cursors: one position per region ---------------------------------------------------


def cursor_positions(
    payload: dict[str, Any], stores: Sequence[Store], *, field_name: str = "k"
) -> dict[str, Any]:
    """Per region tag, where this page starts, from a verified cursor payload. One region
    reads the one-region cursor (``k``: its LastEvaluatedKey); several read ``r``, one
    position per region (a region read to its end has none and is not read again)."""
    tags = [s.tag for s in stores]
    if len(stores) == 1:
        if field_name not in payload or "r" in payload:
            raise CursorMismatch("issued for other regions")
        return {tags[0]: payload[field_name]}
    positions = payload.get("r")
    if not isinstance(positions, dict) or not set(positions) <= set(tags):
        raise CursorMismatch("issued for other regions")
    return positions


def cursor_fields(
    positions: dict[str, Any], stores: Sequence[Store], *, field_name: str = "k"
) -> dict[str, Any]:
    """The cursor payload's positions (see :func:`cursor_positions`)."""
    if len(stores) == 1:
        return {field_name: positions.get(stores[0].tag)}
    return {"r": positions}


def fan_out(
    stores: Sequence[Store],
    positions: dict[str, Any] | None,
    read: Callable[[Store, Any], Run],
) -> list[Run]:
    """Each region's run for one page: every region on the first page, then those the
    cursor says have more."""
    if positions is None:
        return [read(store, None) for store in stores]
    return [read(store, positions[store.tag]) for store in stores if store.tag in positions]
