"""Reads for the dashboard: queue pages, counts, ageing, case detail with live evidence.

Every listing is a Query (never a Scan). Queue pages use the sparse ``open_by_queue``
index, oldest first, ``Limit`` plus an opaque cursor that is signed and bound to its
queue and filters, so it cannot be tampered into reading another queue.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from itertools import islice
from typing import Any

from django.core import signing

from reconciliation import clock
from reconciliation.audit.day_index import DayIndexReader, Paging
from reconciliation.audit.filters import AuditFilters, FilterAsk
from reconciliation.audit.repository import AuditRepository
from reconciliation.audit.search import SEARCH_QUERY_BUDGET
from reconciliation.cases.counters import QueueCounter
from reconciliation.cases.models import DRILL_TENANT, WALK_PAGE, Case
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import QUEUES, CaseType, Queue
from reconciliation.casework.evidence import DecisionEvidence, evidence_of_cases
from reconciliation.casework.regions import (
    CursorMismatch,
    Run,
    cursor_fields,
    cursor_positions,
    fan_out,
    index_key,
    merge_runs,
    merged_counters,
    open_count,
    owned,
    plain,
    stores_of,
)
from reconciliation.casework.rows import CaseRow, _reason, _row
from reconciliation.claims.ledger import FundTotal, fund_total
from reconciliation.claims.models import TOKEN_WINDOW_S, Claim, ClaimStatus, Pledge
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.dynamo.cancellation import DecodedReason
from reconciliation.dynamo.items import from_item
from reconciliation.stores import Store, case_tag

CURSOR_SALT = "reconciliation.queue-cursor"
MAX_PAGE = 100
# A filtered page reads at most this many index pages to fill itself.
MAX_QUERIES_PER_PAGE = 10
AGE_BUCKETS = (
    ("< 1 h", 0, 3600),
    ("1–4 h", 3600, 4 * 3600),
    ("4–24 h", 4 * 3600, 86400),
    ("> 24 h", 86400, None),
)


class InvalidFilter(ValueError):
    """A filter or cursor value is malformed or was not issued for this queue."""

    def __init__(self, fields: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields

    @property
    def problems(self) -> str:
        """What is wrong, in words for the page (the field names left out)."""
        return "; ".join(self.fields.values())


# How a queue page may be ordered: the index that holds that order and its direction.
# Every order is an index of its own (docs/design.md §3), so a sorted page is still one Query
# of ``Limit`` rows, whatever the queue's size: never a read of the whole queue.
SORTS: dict[str, tuple[str, bool]] = {
    "oldest": ("open_by_queue", True),
    "newest": ("open_by_queue", False),
    "amount_desc": ("open_by_amount", False),
    "amount": ("open_by_amount", True),
    "fund": ("open_by_fund", True),
    "fund_desc": ("open_by_fund", False),
}
SORT_WORDS = {
    "oldest": "oldest first",
    "newest": "newest first",
    "amount_desc": "largest amount first",
    "amount": "smallest amount first",
    "fund": "by fund, A to Z",
    "fund_desc": "by fund, Z to A",
}
DEFAULT_SORT = "oldest"


@dataclass(frozen=True)
class QueueFilters:
    """What a queue page is narrowed to, already validated (the dashboard's filter form
    cleans what a person typed), and its order."""

    fund: str = ""
    min_amount: Decimal | None = None
    min_age_s: int | None = None
    assignee: str = ""
    sort: str = DEFAULT_SORT
    drill: bool = False  # the drill's cases too (DRILL_TENANT); left out by default

    @property
    def without_tenant(self) -> str:
        """The tenant whose cases the read leaves out: the drill's, unless asked for."""
        return "" if self.drill else DRILL_TENANT

    def opened_before(self) -> str | None:
        """The minimum age as the latest opening instant it keeps (``None``: any age)."""
        if not self.min_age_s:
            return None
        return clock.iso(clock.now() - timedelta(seconds=self.min_age_s))

    def index_values(self) -> dict[str, Any]:
        """The filters the queue indexes apply (``CaseRepository.query_queue``'s
        ``filters``); an empty one applies nothing."""
        return {"fund": self.fund, "min_amount": self.min_amount, "assignee": self.assignee}

    def fingerprint(self) -> str:
        raw = [self.fund, str(self.min_amount or ""), self.min_age_s or 0, self.assignee]
        if self.sort != DEFAULT_SORT:
            # A cursor carries its index's key: it is valid only in the order it came from.
            raw.append(self.sort)
        if self.drill:
            raw.append("drill")  # a cursor stays with the list it came from
        return hashlib.sha256(json.dumps(raw).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class QueuePage:
    queue: str
    rows: list[CaseRow]
    next_cursor: str | None
    read_units: float
    queries: int


def _encode_cursor(
    queue: str, filters: QueueFilters, positions: dict[str, Any], stores: list[Store]
) -> str:
    payload = {"q": queue, "f": filters.fingerprint(), **cursor_fields(positions, stores)}
    return signing.dumps(payload, salt=CURSOR_SALT, compress=True)


def _decode_cursor(
    queue: str, filters: QueueFilters, cursor: str, stores: list[Store]
) -> dict[str, Any]:
    """Per region, where the page starts (:mod:`reconciliation.casework.regions`)."""
    try:
        payload = signing.loads(cursor, salt=CURSOR_SALT)
    except signing.BadSignature:
        raise InvalidFilter({"cursor": "not a cursor this server issued"}) from None
    if not isinstance(payload, dict):
        raise InvalidFilter({"cursor": "not a cursor this server issued"})
    if payload.get("q") != queue or payload.get("f") != filters.fingerprint():
        raise InvalidFilter({"cursor": "issued for another queue or other filters"})
    try:
        return cursor_positions(payload, stores)
    except CursorMismatch as exc:
        raise InvalidFilter({"cursor": str(exc)}) from None


# Each queue index's sort key: a merged page orders rows by it alone. DynamoDB returns
# rows with equal values (one fund, one amount) in an order of its own, so a tie must
# never bound a page: each region resumes from the last row taken from it, and the rows
# of one value may interleave across regions in any order without loss or repeat.
SORT_ATTRIBUTES = {
    "open_by_queue": "queue_sort",
    "open_by_amount": "amount",
    "open_by_fund": "fund",
}


def queue_page(
    queue: str,
    *,
    filters: QueueFilters | None = None,
    cursor: str | None = None,
    limit: int = 50,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
) -> QueuePage:
    """Up to ``limit`` open cases of ``queue`` in the filters' order, and the cursor to
    the next: ``store``'s region, or every region of ``stores``, merged (one page of
    each, see :mod:`reconciliation.casework.regions`)."""
    if queue not in QUEUES:
        raise InvalidFilter({"queue": "unknown queue"})
    regions = stores_of(store, stores)
    filters = filters or QueueFilters()
    limit = max(1, min(limit, MAX_PAGE))
    positions = _decode_cursor(queue, filters, cursor, regions) if cursor else None
    opened_before = filters.opened_before()
    filter_values = filters.index_values()
    if filters.sort not in SORTS:
        raise InvalidFilter({"sort": "unknown order"})
    index, forward = SORTS[filters.sort]
    attribute = SORT_ATTRIBUTES[index]
    read = _QueueRead(queue, filters, limit, opened_before, filter_values, index, forward)
    merged = merge_runs(
        fan_out(regions, positions, read),
        limit=limit,
        sort_key=read.sort_key,
        descending=not forward,
        position_of=lambda _, row: index_key(row, "queue", attribute),
    )
    rows = [_row(item) for _, item in merged.rows]
    if queue == CaseType.CANCELLED_TRANSACTION and rows:
        rows = _with_reasons(rows, merged.rows, regions)
    next_cursor = (
        _encode_cursor(queue, filters, merged.positions, regions) if merged.positions else None
    )
    return QueuePage(queue, rows, next_cursor, merged.units, merged.queries)


@dataclass(frozen=True)
class _QueueRead:
    """One region's read of a queue page: Query pages of the queue's index in the
    filters' order until the page is full (or its query budget spent)."""

    queue: str
    filters: QueueFilters
    limit: int
    opened_before: str | None
    filter_values: dict[str, Any]
    index: str
    forward: bool

    def sort_key(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return (row[SORT_ATTRIBUTES[self.index]],)

    def __call__(self, region: Store, start: dict[str, Any] | None) -> Run:
        run = Run(region, start, last_key=start)
        while len(run.rows) < self.limit and run.queries < MAX_QUERIES_PER_PAGE:
            items, run.last_key, units = CaseRepository(region).query_queue(
                Queue.read(self.queue),
                limit=self.limit - len(run.rows),
                start_key=run.last_key,
                opened_before=self.opened_before,
                filters=self.filter_values,
                index=self.index,
                forward=self.forward,
                without_tenant=self.filters.without_tenant,
            )
            run.queries += 1
            run.units += units
            run.rows.extend(owned(items, region))
            if not run.last_key:
                break
        if run.last_key:
            run.frontier = self.sort_key(plain(run.last_key))
        return run


def _with_reasons(
    rows: list[CaseRow], merged: list[tuple[Store, dict[str, Any]]], regions: list[Store]
) -> list[CaseRow]:
    """The rows with their cancellation reasons. The reasons are not in the index (they
    can be long): one BatchGetItem for the page's rows per region they came from, so the
    cost follows the page."""
    decoded: dict[str, tuple[DecodedReason, ...]] = {}
    for region in regions:
        ids = [item["case_id"] for where, item in merged if where is region]
        if ids:
            decoded.update(CaseRepository(region).decoded_of(ids))
    return [
        replace(r, reason=short, reason_detail=full)
        for r in rows
        for short, full in [_reason(decoded.get(r.case_id, ()))]
    ]


def queue_counts(
    store: Store | None = None, *, stores: Sequence[Store] | None = None
) -> dict[str, int]:
    """Open cases per queue: counter items kept in the same transactions as the cases,
    each region's own, summed."""
    return {q: c.count for q, c in queue_counters(store, stores=stores).items()}


def queue_counters(
    store: Store | None = None, *, stores: Sequence[Store] | None = None
) -> dict[str, QueueCounter]:
    """Open cases and their amount at risk per currency, per queue: one BatchGetItem of
    counter items per region, summed."""
    return merged_counters(stores_of(store, stores))


def totals_by_currency(counters: dict[str, QueueCounter]) -> QueueCounter:
    """Every queue's counters summed: the amount at risk across all open cases."""
    total = QueueCounter()
    for counter in counters.values():
        total.merge(counter)
    return total


def _open_queues(counts: dict[str, int]) -> list[str]:
    """The queues worth a Query: those the counters say hold open cases."""
    return [q for q in QUEUES if counts.get(q, 0) > 0]


def _oldest_owned(queue: str, store: Store) -> dict[str, Any] | None:
    """The oldest open case of ``queue`` living in ``store``'s region, the drill's left
    out: one ``Limit=1`` Query, reading on (a page at a time) only when that row is
    another region's replica or the drill's filter dropped it."""
    repo = CaseRepository(store)
    limit, start = 1, None
    while True:
        items, start, _ = repo.query_queue(
            Queue.read(queue), limit=limit, start_key=start, without_tenant=DRILL_TENANT
        )
        mine = owned(items, store)
        if mine or not start:
            return mine[0] if mine else None
        limit = WALK_PAGE


def queue_oldest(
    counts: dict[str, int], store: Store | None = None, *, stores: Sequence[Store] | None = None
) -> dict[str, CaseRow | None]:
    """The oldest open case per queue over every region; a queue that ``counts`` (from
    :func:`queue_counts`) says is empty costs no Query."""
    regions = stores_of(store, stores)
    out: dict[str, CaseRow | None] = dict.fromkeys(QUEUES)
    for queue in _open_queues(counts):
        found = [row for region in regions if (row := _oldest_owned(queue, region))]
        out[queue] = _row(min(found, key=lambda r: r["queue_sort"])) if found else None
    return out


def queue_ageing(
    counts: dict[str, int], store: Store | None = None, *, stores: Sequence[Store] | None = None
) -> dict[str, list[tuple[str, int]]]:
    """Open cases per age bucket per queue (COUNT queries over the range key, per
    region); a queue that ``counts`` says is empty has zero in every bucket without
    asking."""
    regions = stores_of(store, stores)
    now = clock.now()
    result: dict[str, list[tuple[str, int]]] = {
        q: [(label, 0) for label, _, _ in AGE_BUCKETS] for q in QUEUES
    }
    for queue in _open_queues(counts):
        buckets = []
        for label, young, old in AGE_BUCKETS:
            newest = clock.iso(now - timedelta(seconds=young))
            oldest = clock.iso(now - timedelta(seconds=old)) if old else None
            n = open_count(
                regions, Queue.read(queue), before=newest, after=oldest, without_tenant=DRILL_TENANT
            )
            buckets.append((label, n))
        result[queue] = buckets
    return result


def case_detail(case_id: str, store: Store) -> Case | None:
    return CaseRepository(store).get(case_id)


@dataclass(frozen=True)
class CaseWithEvidence:
    """A case as stored (its request included, which a queue row leaves out) and what
    consistent reads of its pledge and claim found."""

    case: Case
    evidence: DecisionEvidence


def cases_with_evidence(
    case_ids: Sequence[str], *, stores: Sequence[Store]
) -> dict[str, CaseWithEvidence]:
    """The cases ``case_ids`` with their pledge and claim, by case id. Per region the
    cases live in (their ids name it): one BatchGetItem of the cases, one of their
    pledges and one of their claims, per 100 cases; a case of a region not in
    ``stores``, or no longer found, is absent."""
    by_tag = {region.tag: region for region in stores}
    wanted: dict[str, list[str]] = {}
    for case_id in dict.fromkeys(case_ids):
        wanted.setdefault(case_tag(case_id), []).append(case_id)
    out: dict[str, CaseWithEvidence] = {}
    for tag, ids in wanted.items():
        region = by_tag.get(tag)
        if region is None:
            continue
        cases = CaseRepository(region).get_many(ids)
        evidence = evidence_of_cases(region, cases)
        out.update({c.case_id: CaseWithEvidence(c, evidence[c.case_id]) for c in cases})
    return out


@dataclass(frozen=True)
class Evidence:
    """Live, consistent reads of everything a case is about, and when they were taken."""

    read_at: str
    claim: Claim | None
    pledge: Pledge | None
    ledger: FundTotal | None
    token_issued_at: str
    token_age_s: int
    inside_token_window: bool
    notes: list[str] = field(default_factory=list)


def case_evidence(
    case: Case,
    store: Store,
    *,
    ledger_stores: Sequence[Store] | None = None,
    known: DecisionEvidence | None = None,
) -> Evidence:
    """The claim and pledge in the case's region (``store``); the fund's ledger total
    over ``ledger_stores`` (the edge's ``every_store()``: every region's shards), or
    ``store``'s region alone when not given. The claim and pledge an action on the case
    read and wrote just now (``known``: the page after it) are not read again."""
    if known is not None and known.claim_read:
        claim = known.claim
    else:
        claim = ClaimRepository(store).get(case.claim_pk, consistent=True)
    if known is not None and known.pledge_read:
        pledge = known.pledge
    else:
        pledge = PledgeRepository(store).get(case.intent_id, consistent=True)
    ledger = (
        fund_total(list(ledger_stores or [store]), case.fund, case.currency) if case.fund else None
    )
    now = clock.now()
    read_at = clock.iso(now)
    if known is not None and (known.claim_read or known.pledge_read):
        read_at = known.read_at  # when the oldest of them was read: the action's reads
    # A case not opened from a claim's attempt (an undelivered acknowledgement) has no
    # token of its own: its window is taken as closed.
    issued = case.token_issued_at
    age = int((now - clock.parse_iso(issued)).total_seconds()) if issued else TOKEN_WINDOW_S
    notes = []
    if claim is None:
        notes.append("The claim item is gone (TTL); the durable pledge record decides.")
    elif claim.version != case.claim_version:
        notes.append(
            f"The claim moved on since the case opened (version {case.claim_version} → "
            f"{claim.version}, now {ClaimStatus.words(claim.status).lower()})."
        )
    return Evidence(
        read_at=read_at,
        claim=claim,
        pledge=pledge,
        ledger=ledger,
        token_issued_at=case.token_issued_at,
        token_age_s=age,
        inside_token_window=age < TOKEN_WINDOW_S,
        notes=notes,
    )


def case_timeline(case_id: str, store: Store) -> list[dict[str, Any]]:
    """The case's audit events, oldest first (one consistent Query of ``CASE#{id}``)."""
    return AuditRepository(store).stream_events(f"CASE#{case_id}")


def recent_audit_events(
    *, stores: Sequence[Store], limit: int = 20, performed_by: str = ""
) -> list[dict[str, Any]]:
    """The newest ``limit`` audit events of today and yesterday (UTC) in every region of
    ``stores`` (each region's own streams), newest first; only ``performed_by``'s when
    given (:func:`policy.audit_visible_performer`).

    The ``by_day`` reader merges the day's shards newest first, ``limit`` a page, and
    opens yesterday only when today holds fewer than ``limit``: never a Scan."""
    reader = DayIndexReader(
        AuditRepository(stores[0]) if len(stores) == 1 else stores,
        AuditFilters.build(FilterAsk(), default_days=2, performed_by=performed_by),
        descending=True,
        # Filtered to one person, the newest ``limit`` may lie far back: bounded like a
        # search page, so the overview never reads two whole days.
        paging=Paging(page_limit=limit, max_queries=SEARCH_QUERY_BUDGET, prefetch=True),
    )
    return [from_item(i) for i in islice(reader, limit)]
