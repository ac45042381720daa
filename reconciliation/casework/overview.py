"""The overview in a constant number of DynamoDB calls, whatever the queues, cases and
regions, and whether or not its summary is fresh (docs/benchmarks.md).

What the overview shows comes in two kinds. The open cases per queue and their amount
at risk are counter items, read live: one BatchGetItem per region. Everything else —
the oldest case and the ageing buckets per queue, the cases past their queue's SLA, the
override requests waiting, the latest audit events — takes Queries per queue and per
audit shard (64-81 calls for seven queues in one region, growing with the cases). Those
are the **summary**: computed off the request path by ``overview_summary_task`` on a
worker, for every viewer, and kept as one item beside the counters (``#OVERVIEW#`` in
the first region's cases table), which the counters' BatchGetItem reads at no extra call.

A summary is fresh while it is younger than ``OVERVIEW_SUMMARY_MAX_AGE_S`` *and* was
computed from the open counts the counters show now. A view never pays the Queries
itself: finding the kept summary stale (a case opened, moved or closed anywhere, or the
age limit passed) it shows the kept one with its age, and finding none at all (a new
install) it shows the counters and says the rest is being computed. Either way the one
viewer whose conditional mark on the kept item succeeds (``CaseRepository.kept_ask``:
one UpdateItem, which creates the item when there is none) queues the task; the others
see the mark (in what they read, or by their own ask being refused) and queue nothing,
until ``ASK_AGAIN_S`` passes without a new summary. So every view costs one
BatchGetItem per region, plus at most that one UpdateItem when stale or missing.
Changes that move no count (an assignment, an event with no queue move) show when the
summary ages out. Finance staff see their own events among the summary's latest
``EVENTS_KEPT`` (``policy.audit_visible_performer``); the audit trail searches further.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from reconciliation import clock
from reconciliation.audit.models import AuditAction
from reconciliation.cases.counters import QueueCounter
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import QUEUES, Queue
from reconciliation.casework.notifications import Digest, QueueBreach, supervisor_digest
from reconciliation.casework.regions import merged_counters_and
from reconciliation.casework.rows import CaseRow
from reconciliation.casework.selectors import queue_ageing, queue_oldest, recent_audit_events
from reconciliation.dynamo.item_size import item_size
from reconciliation.dynamo.items import to_item
from reconciliation.stores import Store

SUMMARY_ID = "#OVERVIEW#"
# Events kept in the summary: the newest of every performer, so that a finance staff
# member's own recent actions are usually among them.
EVENTS_KEPT = 50
# Override requests waiting, listed by name (the count is the counters').
APPROVALS_KEPT = 5
DEFAULT_MAX_AGE_S = 30
# Under DynamoDB's 400 KB item limit with room to spare: long events are dropped from
# the kept copy (oldest first) rather than the summary not being kept at all.
MAX_KEPT_BYTES = 200_000
# A stale summary is asked to be refreshed again after this long without a new one (the
# task queue lost the first ask, or its worker was busy).
ASK_AGAIN_S = 10


@dataclass(frozen=True)
class OverviewSummary:
    """The overview's Query-bound parts, as of ``computed_at``, for the open ``counts``
    they were computed from."""

    computed_at: str
    counts: dict[str, int]
    oldest: dict[str, CaseRow | None]
    ageing: dict[str, list[tuple[str, int]]]
    digest: Digest
    events: list[dict[str, Any]]

    def is_fresh(self, counts: dict[str, int], *, max_age_s: float) -> bool:
        age = clock.now() - clock.parse_iso(self.computed_at)
        return self.counts == counts and timedelta(0) <= age < timedelta(seconds=max_age_s)

    def events_of(self, performer: str, *, limit: int) -> list[EventRow]:
        """The newest events as ``limit`` rows at most (signatures collapsed:
        :func:`event_rows`), only ``performer``'s when given."""
        chosen = [e for e in self.events if not performer or _performer(e) == performer]
        return event_rows(chosen, limit=limit)


# The system's periodic checkpoint signatures: many an hour on a quiet trail, one row.
ROUTINE_SIGNATURES = frozenset({AuditAction.AUDIT_CHECKPOINT, AuditAction.AUDIT_CHECKPOINT_PART})


@dataclass(frozen=True)
class EventRow:
    """One row of the overview's latest events: an event, or a run of consecutive
    signatures (``signatures`` > 0) from ``first_at`` to ``last_at``."""

    event: dict[str, Any] | None = None
    signatures: int = 0
    first_at: str = ""
    last_at: str = ""


def event_rows(events: Sequence[dict[str, Any]], *, limit: int) -> list[EventRow]:
    """``events`` (newest first) as at most ``limit`` rows, consecutive checkpoint
    signatures collapsed into one row each, so that on a quiet trail the events
    people made stay in view (a fresh install showed 14-20 "Signed checkpoint" of 20)."""
    rows: list[EventRow] = []
    run: list[dict[str, Any]] = []

    def close_run() -> None:
        if run:
            newest, oldest = run[0], run[-1]
            rows.append(
                EventRow(
                    event=newest if len(run) == 1 else None,
                    signatures=0 if len(run) == 1 else len(run),
                    first_at=str(oldest.get("at", "")),
                    last_at=str(newest.get("at", "")),
                )
            )
            run.clear()

    for event in events:
        if event.get("action") in ROUTINE_SIGNATURES:
            run.append(event)
            continue
        close_run()
        if len(rows) >= limit:
            break
        rows.append(EventRow(event=event))
    close_run()
    return rows[:limit]


@dataclass(frozen=True)
class Overview:
    """What a view shows: the live counters and the kept summary (``None``: none was
    ever computed), and whether that summary is stale (``refreshing``: a new one is
    asked for, or being computed on a worker)."""

    counters: dict[str, QueueCounter]
    summary: OverviewSummary | None
    refreshing: bool = False


def _performer(event: dict[str, Any]) -> str:
    actor = event.get("actor")
    return str(actor.get("username", "")) if isinstance(actor, dict) else ""


def overview_read(
    *,
    stores: Sequence[Store],
    refresh_later: Callable[[], bool],
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> Overview:
    """The counters (one BatchGetItem per region, which also reads the kept summary) and
    the kept summary, never computed here. A stale or missing one is shown as it is (or
    not at all), and ``refresh_later`` (queue ``overview_summary_task``; ``True`` if
    queued) is called by the one viewer whose ask is recorded. ``max_age_s`` 0: no
    summary is ever fresh, every view asks (at most once per ``ASK_AGAIN_S``)."""
    read = merged_counters_and(stores, SUMMARY_ID)
    counters = read.counters
    counts = {q: c.count for q, c in counters.items()}
    kept = read.items.get(SUMMARY_ID)
    # Only an ask's mark, before the first summary is kept: no summary yet.
    summary = summary_from_item(kept) if kept and "computed_at" in kept else None
    if summary is not None and summary.is_fresh(counts, max_age_s=max_age_s):
        return Overview(counters, summary)
    now = clock.now()
    asked_before = clock.iso(now - timedelta(seconds=ASK_AGAIN_S))
    # Asked lately, as read: the ask would be refused, so it is not sent.
    if str((kept or {}).get("refresh_asked_at", "")) >= asked_before:
        return Overview(counters, summary, refreshing=True)
    asked = CaseRepository(stores[0]).kept_ask(
        SUMMARY_ID,
        computed_at=summary.computed_at if summary is not None else None,
        now=clock.iso(now),
        asked_before=asked_before,
    )
    if asked:
        refresh_later()
    return Overview(counters, summary, refreshing=True)


def overview_summary_refresh(
    *, stores: Sequence[Store], approvals: int = APPROVALS_KEPT
) -> OverviewSummary:
    """Compute the summary from the counts now and keep it (``overview_summary_task``,
    off the request path): it replaces the kept item whole, its ask mark included."""
    counters = merged_counters_and(stores).counters
    summary = overview_summary_compute(stores=stores, counters=counters, approvals=approvals)
    CaseRepository(stores[0]).kept_put(SUMMARY_ID, _fitting(summary_to_item(summary)))
    return summary


def overview_summary_compute(
    *, stores: Sequence[Store], counters: dict[str, QueueCounter], approvals: int
) -> OverviewSummary:
    """The Query-bound reads, on a worker: per queue that holds cases the oldest, four
    age COUNTs and the SLA reads; the approvals page; the latest events of today and
    yesterday. The drill's cases are left out of all of them, as the overview's counts
    leave out the counters' drill share; ``counts`` (the whole counts, the drill's
    included) is what the summary's freshness compares."""
    counts = {q: c.count for q, c in counters.items()}
    real = {q: c.without_drill().count for q, c in counters.items()}
    return OverviewSummary(
        computed_at=clock.iso(clock.now()),
        counts=dict(counts),
        oldest=queue_oldest(counts, stores=stores),
        ageing=queue_ageing(counts, stores=stores),
        digest=supervisor_digest(stores=stores, counts=real, rows=approvals),
        events=recent_audit_events(limit=EVENTS_KEPT, stores=stores),
    )


# --- kept as one item ------------------------------------------------------------------


def _row_values(row: CaseRow | None) -> dict[str, Any] | None:
    return asdict(row) if row is not None else None


def _row_of(values: dict[str, Any] | None) -> CaseRow | None:
    if values is None:
        return None
    known = {k: v for k, v in values.items() if k in CaseRow.__dataclass_fields__}
    known["version"] = int(known.get("version", 0))
    known["amount"] = Decimal(str(known.get("amount", "0")))
    return CaseRow(**known)


def _fitting(values: dict[str, Any]) -> dict[str, Any]:
    while values["events"] and item_size(to_item(values)) > MAX_KEPT_BYTES:
        values = {**values, "events": values["events"][: len(values["events"]) // 2]}
    return values


def summary_to_item(summary: OverviewSummary) -> dict[str, Any]:
    """The summary as plain values for one item (no float, no tuple: DynamoDB types)."""
    digest = summary.digest
    return {
        "computed_at": summary.computed_at,
        "counts": summary.counts,
        "oldest": {q: _row_values(r) for q, r in summary.oldest.items()},
        "ageing": {q: [[label, n] for label, n in b] for q, b in summary.ageing.items()},
        "digest": {
            "at": clock.iso(digest.at),
            "waiting_count": digest.waiting_count,
            "waiting": [_row_values(r) for r in digest.waiting],
            "past_sla": [
                {
                    "queue": str(b.queue),
                    "sla_hours": b.sla_hours,
                    "count": b.count,
                    "oldest": [_row_values(r) for r in b.oldest],
                }
                for b in digest.past_sla
            ],
        },
        "events": summary.events,
    }


def summary_from_item(item: dict[str, Any]) -> OverviewSummary:
    digest = item["digest"]
    return OverviewSummary(
        computed_at=item["computed_at"],
        counts={q: int(n) for q, n in item["counts"].items()},
        oldest={q: _row_of(item["oldest"].get(q)) for q in QUEUES},
        ageing={
            q: [(str(label), int(n)) for label, n in item["ageing"].get(q, [])] for q in QUEUES
        },
        digest=Digest(
            at=clock.parse_iso(digest["at"]),
            waiting_count=int(digest["waiting_count"]),
            waiting=[r for v in digest["waiting"] if (r := _row_of(v))],
            past_sla=[
                QueueBreach(
                    Queue(b["queue"]),
                    Decimal(str(b["sla_hours"])),
                    int(b["count"]),
                    [r for v in b["oldest"] if (r := _row_of(v))],
                )
                for b in digest["past_sla"]
            ],
        ),
        events=list(item["events"]),
    )
