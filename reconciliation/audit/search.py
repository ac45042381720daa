"""Audit search: one page of matching events, newest first, as rows for the audit page,
with the chain status of the streams they belong to and the cursor of the next page.

Given every region's store, a page merges the regions' events by time (each region's
own streams only, so a replica never shows twice), each stream's chain is checked in
its home region, and the cursor carries a position per region.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from reconciliation.audit.chains import ChainStatus, chain_statuses
from reconciliation.audit.day_index import (
    Cursor,
    DayIndexReader,
    Paging,
    cursor_regions,
    decode_event,
)
from reconciliation.audit.filters import AuditFilters
from reconciliation.audit.models import AuditAction
from reconciliation.stores import Store

SEARCH_PAGE_SIZE = 50
# A search page stops after this many Queries (per region) even if the page is not full
# (sparse filters over a long range); the cursor then continues where the search stopped.
SEARCH_QUERY_BUDGET = 96


@dataclass(frozen=True)
class AuditRow:
    at: str
    stream: str
    seq: int
    event_id: str
    action: AuditAction
    actor_username: str
    actor_email: str
    actor_role: str
    client_address: str
    correlation_id: str
    case_id: str
    intent_id: str
    disposition: str
    reason_code: str
    reason_text: str
    hash: str
    chain_ok: bool | None = None
    # What the event says changed, as stored (the page puts them in words).
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None

    @classmethod
    def from_event(cls, event: dict[str, Any], chain_ok: bool | None = None) -> AuditRow:
        actor = event.get("actor") or {}
        return cls(
            at=event.get("at", ""),
            stream=event.get("stream", ""),
            seq=int(event.get("seq", 0)),
            event_id=event.get("event_id", ""),
            action=AuditAction.read(event.get("action", "")),
            actor_username=actor.get("username", ""),
            actor_email=actor.get("email", ""),
            actor_role=actor.get("role", ""),
            client_address=event.get("client_address", ""),
            correlation_id=event.get("correlation_id", ""),
            case_id=event.get("case_id", ""),
            intent_id=event.get("intent_id", ""),
            disposition=event.get("disposition", ""),
            reason_code=event.get("reason_code", ""),
            reason_text=event.get("reason_text", ""),
            hash=event.get("hash", ""),
            chain_ok=chain_ok,
            before=event.get("before"),
            after=event.get("after"),
            detail=event.get("detail"),
        )


# Rows the page folds when several come in a row: the checkpoint task's, one an hour
# whether anything happened or not, which would push the events people look for off
# the page.
FOLDED_ACTIONS = frozenset({AuditAction.AUDIT_CHECKPOINT, AuditAction.AUDIT_CHECKPOINT_PART})


@dataclass(frozen=True)
class CheckpointRun:
    """Consecutive checkpoint rows of a page (newest first), shown as one row."""

    rows: tuple[AuditRow, ...]

    @property
    def newest(self) -> AuditRow:
        return self.rows[0]

    @property
    def oldest(self) -> AuditRow:
        return self.rows[-1]

    @property
    def checkpoints(self) -> int:
        return sum(1 for r in self.rows if r.action == AuditAction.AUDIT_CHECKPOINT)

    @property
    def periods(self) -> tuple[str, str]:
        """The first and last period start the run's checkpoints sign (as stored)."""
        starts = sorted(
            str((r.detail or {}).get("start", ""))
            for r in self.rows
            if r.action == AuditAction.AUDIT_CHECKPOINT
        )
        return (starts[0], starts[-1]) if starts else ("", "")

    @property
    def chain_ok(self) -> bool | None:
        """Broken if any row's chain is, intact if every one is, else unknown."""
        states = {r.chain_ok for r in self.rows}
        if False in states:
            return False
        return True if states == {True} else None


@dataclass(frozen=True)
class AuditPage:
    rows: list[AuditRow]
    next_cursor: str | None
    # Set when the page stopped on its query budget before filling: the search went
    # as far as this day and may find more further on.
    searched_to: date | None
    chains: dict[str, ChainStatus]

    @property
    def broken(self) -> list[ChainStatus]:
        return [c for c in self.chains.values() if not c.ok]

    @property
    def chains_ok(self) -> bool:
        return not self.broken

    @property
    def shown(self) -> list[AuditRow | CheckpointRun]:
        """The rows as the page lists them: two or more checkpoint rows in a row folded
        into one :class:`CheckpointRun`."""
        out: list[AuditRow | CheckpointRun] = []
        run: list[AuditRow] = []
        for row in [*self.rows, None]:
            if row is not None and row.action in FOLDED_ACTIONS:
                run.append(row)
                continue
            if len(run) > 1:
                out.append(CheckpointRun(tuple(run)))
            else:
                out.extend(run)
            run = []
            if row is not None:
                out.append(row)
        return out


def audit_search(
    *,
    filters: AuditFilters,
    cursor: str | None = None,
    page_size: int = SEARCH_PAGE_SIZE,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
    with_chains: bool = True,
) -> AuditPage:
    """One page of matching events, newest first, and the chain status of their streams,
    over ``stores`` (every region, merged) or the one region ``store``."""
    sources = list(stores) if stores else [store] if store else []
    if not sources:
        raise ValueError("audit_search needs a store or stores")
    start = Cursor.decode(cursor, filters, regions=cursor_regions(sources)) if cursor else None
    reader = DayIndexReader(
        sources,
        filters,
        descending=True,
        cursor=start,
        paging=Paging(
            page_limit=max(page_size * 2, 100),
            max_queries=SEARCH_QUERY_BUDGET * len(sources),
            prefetch=True,
        ),
    )
    events: list[dict[str, Any]] = []
    items = iter(reader)
    try:
        for item in items:
            events.append(decode_event(item))
            if len(events) >= page_size:
                break
    finally:
        items.close()
    following = reader.cursor()
    searched_to = following.day if reader.stopped_early and following else None
    streams = {e["stream"] for e in events}
    chains = chain_statuses(streams, stores=sources) if with_chains else {}
    rows = [
        AuditRow.from_event(e, chains[e["stream"]].ok if e["stream"] in chains else None)
        for e in events
    ]
    return AuditPage(
        rows=rows,
        next_cursor=following.encode(filters) if following else None,
        searched_to=searched_to,
        chains=chains,
    )
