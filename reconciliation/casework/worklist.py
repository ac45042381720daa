"""The worklist (docs/worklist.md): every open case across the queues in one list, the
filters finance narrows it by, its three orders, and the totals per currency.

Read by Query only: the per-queue counters say which queues hold anything, and each of
those is read through its ``open_by_queue`` index, oldest first, in one Query per region
(``Limit`` the cap), with the filters the index takes (fund, minimum amount, minimum age,
one assignee, the drill's tenant left out unless asked for) applied by DynamoDB. At most
:data:`PER_QUEUE_CAP` rows of each queue are read; when a queue holds more that match,
the list says it is cut short (the oldest are kept) and asks for narrower filters. The
rest of the filters, the order and the totals then work on those rows: an amount order
and a total need every row they cover, so the list is read whole, never a page at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from reconciliation import clock
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import QUEUES, CaseType, Queue, queue_for
from reconciliation.casework.regions import owned
from reconciliation.casework.rows import CaseRow, _row
from reconciliation.casework.selectors import QueueFilters, queue_counters
from reconciliation.codes import Code
from reconciliation.stores import Store, case_tag

PER_QUEUE_CAP = 500
# What the list reads of each open case: what its filters, orders, SLA and totals need.
# The rows a page shows are read whole afterwards (:func:`worklist_rows_whole`), in the
# BatchGetItem that reads their donor refs: parsing a row costs botocore in proportion
# to its attributes, and the list reads up to the cap of every queue.
ROW_ATTRIBUTES = (
    "case_id",
    "queue_sort",
    "case_type",
    "opened_at",
    "amount",
    "currency",
    "assignee",
)
# A case this close to its SLA is "due soon".
DUE_SOON_S = 3600


class WorklistSort(Code):
    AGE = "age", "Age, oldest first", "The case waiting longest comes first."
    AMOUNT = (
        "amount",
        "Amount, largest first, within each currency",
        "Grouped by currency (A to Z), largest first inside each: amounts in different "
        "currencies are never compared.",
    )
    SLA = (
        "sla",
        "Time to SLA breach, soonest first",
        "The longest past its SLA first; cases awaiting approval have no SLA and come last.",
    )


class SlaState(Code):
    BREACHED = "breached", "Past SLA", "Open longer than its queue's SLA."
    DUE_SOON = "due_soon", "Due within an hour", "Less than an hour left before its SLA."
    WITHIN = "within", "Within SLA", "More than an hour left before its SLA."
    NONE = "none", "No SLA", "Awaiting a supervisor's approval: listed apart, without an SLA."


# The assignee filter's two words that are not a username.
ASSIGNEE_ME = "me"
ASSIGNEE_NONE = "unassigned"


@dataclass(frozen=True)
class WorklistFilters:
    """What the worklist is narrowed to, already validated (the dashboard's form), and
    its order. ``assignee`` is a username, or :data:`ASSIGNEE_NONE`; "me" is resolved
    to the signed-in person's username before it gets here."""

    queues: tuple[Queue, ...] = ()
    case_type: CaseType | None = None
    fund: str = ""
    currency: str = ""
    assignee: str = ""
    min_age_s: int | None = None
    sla: SlaState | None = None
    min_amount: Decimal | None = None
    max_amount: Decimal | None = None
    sort: WorklistSort = WorklistSort.AGE
    drill: bool = False  # the drill's cases too (DRILL_TENANT); left out by default

    def keeps(self, row: WorklistRow) -> bool:
        """The filters the index does not apply."""
        case = row.case
        return (
            (self.case_type is None or case.case_type == self.case_type)
            and (not self.currency or case.currency == self.currency)
            and (self.assignee != ASSIGNEE_NONE or not case.assignee)
            and (self.sla is None or row.sla == self.sla)
            and (self.max_amount is None or case.amount <= self.max_amount)
        )


@dataclass(frozen=True)
class WorklistRow:
    """One open case as the worklist shows it; ``breach_in_s`` is negative once past."""

    case: CaseRow
    queue: Queue
    sla: SlaState
    breach_in_s: int | None
    age_s: int
    donor_ref: str = ""

    @property
    def overdue_s(self) -> int:
        """How long past its SLA (0 when not past or without one)."""
        return max(0, -(self.breach_in_s or 0))


@dataclass(frozen=True)
class CurrencyTotal:
    currency: str
    count: int
    amount: Decimal


@dataclass
class Worklist:
    rows: list[WorklistRow]
    totals: list[CurrencyTotal]
    cut_short: list[Queue] = field(default_factory=list)  # queues with more than the cap
    queries: int = 0
    drill_left_out: int = 0  # the drill's open cases in the queues read, not listed


@dataclass(frozen=True)
class Sla:
    """Where a case stands against its SLA (:func:`sla_of`)."""

    queue: Queue | None  # the queue the case is in
    state: SlaState
    left_s: int | None  # seconds before the SLA: negative once past; None without one


def sla_of(case: CaseRow, *, hours: Mapping[Queue, Decimal], now: datetime) -> Sla:
    """The case's queue, its SLA state and the seconds left before its SLA (negative
    once past; None without an SLA: the approval queue). The rule of
    :func:`reconciliation.casework.notifications.is_past_sla`."""
    queue = queue_for(case.case_type, case.state)
    if queue is None or queue == Queue.OVERRIDE_REQUESTED or queue not in hours:
        return Sla(queue, SlaState.NONE, None)
    opened = clock.parse_iso(case.opened_at)
    left = int(float(hours[queue]) * 3600 - (now - opened).total_seconds())
    if left <= 0:
        return Sla(queue, SlaState.BREACHED, left)
    return Sla(queue, SlaState.DUE_SOON if left <= DUE_SOON_S else SlaState.WITHIN, left)


def _sorted(rows: list[WorklistRow], order: WorklistSort) -> list[WorklistRow]:
    by_age = sorted(rows, key=lambda r: (r.case.opened_at, r.case.case_id))
    if order == WorklistSort.AMOUNT:
        # Stable sorts: age breaks ties, then largest first, then the currency groups.
        by_amount = sorted(by_age, key=lambda r: r.case.amount, reverse=True)
        return sorted(by_amount, key=lambda r: r.case.currency)
    if order == WorklistSort.SLA:
        return sorted(by_age, key=lambda r: (r.breach_in_s is None, r.breach_in_s or 0))
    return by_age


def currency_totals(rows: Sequence[WorklistRow]) -> list[CurrencyTotal]:
    """Count and sum per currency, currencies A to Z: never one sum across currencies."""
    counts: dict[str, int] = {}
    sums: dict[str, Decimal] = {}
    for row in rows:
        currency = row.case.currency
        counts[currency] = counts.get(currency, 0) + 1
        sums[currency] = sums.get(currency, Decimal(0)) + row.case.amount
    return [CurrencyTotal(c, counts[c], sums[c]) for c in sorted(counts)]


def worklist_read(
    filters: WorklistFilters,
    *,
    stores: Sequence[Store],
    sla_hours: Mapping[Queue, Decimal],
    cap: int = PER_QUEUE_CAP,
) -> Worklist:
    """Every open case that ``filters`` keep, in their order, with the totals per
    currency; raises :class:`~reconciliation.casework.selectors.InvalidFilter` as the
    queue reads do."""
    now = clock.now()
    counters = queue_counters(stores=stores)
    wanted = [q for q in (filters.queues or QUEUES) if counters[q].count > 0]
    index_filters = QueueFilters(
        fund=filters.fund,
        min_amount=filters.min_amount,
        min_age_s=filters.min_age_s,
        assignee="" if filters.assignee == ASSIGNEE_NONE else filters.assignee,
        drill=filters.drill,
    )
    rows: list[WorklistRow] = []
    cut_short: list[Queue] = []
    queries = 0
    for queue in wanted:
        read, asked = _queue_read(queue, index_filters, stores=stores, limit=cap + 1)
        queries += asked
        if len(read) > cap:
            cut_short.append(queue)
            read = read[:cap]
        for case in read:
            sla = sla_of(case, hours=sla_hours, now=now)
            age = int((now - clock.parse_iso(case.opened_at)).total_seconds())
            row = WorklistRow(case, sla.queue or queue, sla.state, sla.left_s, age)
            if filters.keeps(row):
                rows.append(row)
    ordered = _sorted(rows, filters.sort)
    left_out = 0 if filters.drill else sum(counters[q].drill_count for q in wanted)
    return Worklist(ordered, currency_totals(ordered), cut_short, queries, left_out)


def _queue_read(
    queue: Queue, filters: QueueFilters, *, stores: Sequence[Store], limit: int
) -> tuple[list[CaseRow], int]:
    """The oldest ``limit`` open cases of ``queue`` that the index filters keep, over
    every region, and the Queries that took. One Query of ``Limit`` rows per region
    (a queue page is 100 rows at most, so this read once took up to six): DynamoDB
    returns up to 1 MB a call, and ``limit`` index rows are far below it. Only when a
    FilterExpression (fund, amount, assignee, the drill) drops rows, or a region holds
    other regions' replicas, does it read on from where that Query stopped."""
    before = filters.opened_before()
    items: list[dict[str, Any]] = []
    queries = 0
    for store in stores:
        repository = CaseRepository(store)
        mine: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        while True:
            page, start, _ = repository.query_queue(
                queue,
                limit=limit,
                start_key=start,
                opened_before=before,
                filters=filters.index_values(),
                without_tenant=filters.without_tenant,
                attributes=ROW_ATTRIBUTES,
            )
            queries += 1
            mine.extend(owned(page, store))
            if not start or len(mine) >= limit:
                break
        items.extend(mine[:limit])
    items.sort(key=lambda item: item["queue_sort"])  # oldest first, over the regions
    return [_row(item) for item in items[:limit]], queries


def donor_refs_of(case_ids: Sequence[str], *, stores: Sequence[Store]) -> dict[str, str]:
    """The donor refs of ``case_ids`` (not in the queue indexes): one BatchGetItem per
    100 ids and region, so a page pays for its own rows only."""
    refs: dict[str, str] = {}
    for store in stores:
        if case_ids:
            refs.update(CaseRepository(store).donor_refs_of(list(case_ids)))
    return refs


def worklist_rows_whole(
    rows: Sequence[WorklistRow], *, stores: Sequence[Store]
) -> list[WorklistRow]:
    """``rows`` read whole, with their donor refs: each case's listing attributes from
    the table of the region it lives in (one BatchGetItem per 100 ids and region), where
    the list read only what it orders by (:data:`ROW_ATTRIBUTES`). The table's item is
    as new as the index row or newer; a row whose case cannot be read keeps what the list
    read."""
    ids = [r.case.case_id for r in rows]
    listings: dict[str, dict[str, Any]] = {}
    for store in stores:
        mine = [i for i in ids if case_tag(i) == store.tag]
        if mine:
            listings.update(CaseRepository(store).listings_of(mine))
    return [_whole(r, listings.get(r.case.case_id)) for r in rows]


def _whole(row: WorklistRow, listing: dict[str, Any] | None) -> WorklistRow:
    if listing is None:
        return row
    return replace(row, case=_row(listing), donor_ref=listing.get("donor_ref") or "")
