"""Lists beyond the open queues: a person's own open cases ("My cases") and the resolved
cases (docs/design.md §11: /queues/resolved/), each one Query per page and region plus a
signed cursor; several regions are merged (:mod:`reconciliation.casework.regions`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.core import signing

from reconciliation import clock
from reconciliation.cases.models import DRILL_TENANT, resolved_month
from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.regions import (
    CursorMismatch,
    Run,
    cursor_fields,
    cursor_positions,
    fan_out,
    index_key,
    merge_runs,
    owned,
    plain,
    stores_of,
)
from reconciliation.casework.rows import _row
from reconciliation.casework.selectors import (
    MAX_PAGE,
    MAX_QUERIES_PER_PAGE,
    InvalidFilter,
    QueuePage,
)
from reconciliation.stores import Store

# --- "My cases" (open cases assigned to one person) -------------------------------------

MINE_CURSOR_SALT = "reconciliation.mine-cursor"


def assigned_page(
    assignee: str,
    *,
    cursor: str | None = None,
    limit: int = 50,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
) -> QueuePage:
    """``assignee``'s open cases in every queue, oldest first: one Query of the
    ``open_by_assignee`` index per region, merged, ``Limit`` plus a cursor signed for
    this person."""
    regions = stores_of(store, stores)
    limit = max(1, min(limit, MAX_PAGE))
    positions = None
    if cursor:
        payload = _verified(cursor, MINE_CURSOR_SALT)
        if payload.get("a") != assignee:
            raise InvalidFilter({"cursor": "issued for someone else"})
        positions = _positions(payload, regions)

    def read(region: Store, start: dict[str, Any] | None) -> Run:
        items, last_key, units = CaseRepository(region).query_assigned(
            assignee, limit=limit, start_key=start
        )
        run = Run(region, start, owned(items, region), last_key, units=units, queries=1)
        if last_key:
            run.frontier = _by_age(plain(last_key))
        return run

    merged = merge_runs(
        fan_out(regions, positions, read),
        limit=limit,
        sort_key=_by_age,
        descending=False,
        position_of=lambda _, row: index_key(row, "assignee", "queue_sort"),
    )
    rows = [replace(_row(i), queue=i.get("queue", "")) for _, i in merged.rows]
    next_cursor = None
    if merged.positions:
        fields = cursor_fields(merged.positions, regions)
        next_cursor = signing.dumps({"a": assignee, **fields}, salt=MINE_CURSOR_SALT, compress=True)
    return QueuePage("MINE", rows, next_cursor, merged.units, merged.queries)


def _by_age(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["queue_sort"], row["case_id"])


def _verified(cursor: str, salt: str) -> dict[str, Any]:
    try:
        payload = signing.loads(cursor, salt=salt)
    except signing.BadSignature:
        raise InvalidFilter({"cursor": "not a cursor this server issued"}) from None
    if not isinstance(payload, dict):
        raise InvalidFilter({"cursor": "not a cursor this server issued"})
    return payload


def _positions(
    payload: dict[str, Any], regions: list[Store], *, field_name: str = "k"
) -> dict[str, Any]:
    try:
        return cursor_positions(payload, regions, field_name=field_name)
    except CursorMismatch as exc:
        raise InvalidFilter({"cursor": str(exc)}) from None


# --- resolved cases (docs/design.md §11: /queues/resolved/) -----------------------------------

RESOLVED_CURSOR_SALT = "reconciliation.resolved-cursor"
# Without a "since", the list reaches back this many months (one small Query each when
# empty); narrow by time to look further back.
RESOLVED_MONTHS_BACK = 24


@dataclass(frozen=True)
class ResolvedFilters:
    resolved_by: str = ""
    how: str = ""
    fund: str = ""
    since: str = ""  # ISO instants, UTC
    until: str = ""
    drill: bool = False  # the drill's cases too (DRILL_TENANT); left out by default

    def fingerprint(self) -> str:
        raw = json.dumps([self.resolved_by, self.how, self.fund, self.since, self.until])
        if self.drill:
            raw += "+drill"  # a cursor stays with the list it came from
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _month_before(month: str) -> str:
    year, number = int(month[2:6]), int(month[7:9])
    year, number = (year - 1, 12) if number == 1 else (year, number - 1)
    return f"R#{year:04d}-{number:02d}"


def resolved_page(
    *,
    filters: ResolvedFilters | None = None,
    cursor: str | None = None,
    limit: int = 50,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
) -> QueuePage:
    """Resolved cases, newest first: the ``resolved_by_time`` index, month by month from
    the newest, ``Limit`` plus a signed cursor (month and index key, per region) like
    queue pages; several regions are each read so and merged."""
    regions = stores_of(store, stores)
    filters = filters or ResolvedFilters()
    limit = max(1, min(limit, MAX_PAGE))
    newest = resolved_month(filters.until or clock.iso(clock.now()))
    positions = _resolved_positions(cursor, filters, regions) if cursor else None
    read = _ResolvedRead(filters, limit, newest=newest, last=_oldest_month(filters, newest))
    merged = merge_runs(
        fan_out(regions, positions, read),
        limit=limit,
        sort_key=lambda row: (row["resolved_sort"],),
        descending=True,
        position_of=lambda _, row: {
            "m": row["resolved_month"],
            "k": index_key(row, "resolved_month", "resolved_sort"),
        },
    )
    next_cursor = None
    if merged.positions:
        fields = cursor_fields(merged.positions, regions, field_name="p")
        if "p" in fields:
            fields = fields["p"]  # one region: the month and key, as ever
        next_cursor = signing.dumps(
            {"f": filters.fingerprint(), **fields}, salt=RESOLVED_CURSOR_SALT, compress=True
        )
    rows = [_row(item) for _, item in merged.rows]
    return QueuePage("RESOLVED", rows, next_cursor, merged.units, merged.queries)


def _resolved_positions(
    cursor: str, filters: ResolvedFilters, regions: list[Store]
) -> dict[str, Any]:
    """Where each region's read resumes, from a cursor issued for these ``filters``."""
    payload = _verified(cursor, RESOLVED_CURSOR_SALT)
    if payload.get("f") != filters.fingerprint():
        raise InvalidFilter({"cursor": "issued for other filters"})
    if len(regions) == 1 and "m" in payload:
        # One region: the month and index key sit in the cursor itself.
        payload = {**payload, "p": {"m": payload["m"], "k": payload.get("k")}}
    return _positions(payload, regions, field_name="p")


def _oldest_month(filters: ResolvedFilters, newest: str) -> str:
    """The oldest month read: the ``since``'s, else ``RESOLVED_MONTHS_BACK`` back."""
    if filters.since:
        return resolved_month(filters.since)
    last = newest
    for _ in range(RESOLVED_MONTHS_BACK):
        last = _month_before(last)
    return last


@dataclass(frozen=True)
class _ResolvedRead:
    """One region's read of a page: month by month from its position (or ``newest``)
    down to ``last``, until the page is full."""

    filters: ResolvedFilters
    limit: int
    newest: str
    last: str

    def __call__(self, region: Store, position: dict[str, Any] | None) -> Run:
        filters, limit = self.filters, self.limit
        wanted = {
            "resolved_by": filters.resolved_by,
            "resolved_how": filters.how,
            "fund": filters.fund,
        }
        month, start = (position["m"], position.get("k")) if position else (self.newest, None)
        run = Run(region, position)
        done = False
        while len(run.rows) < limit and run.queries < MAX_QUERIES_PER_PAGE + RESOLVED_MONTHS_BACK:
            items, start, units = CaseRepository(region).query_resolved(
                month,
                limit=limit - len(run.rows),
                start_key=start,
                after=filters.since or None,
                before=filters.until or None,
                filters=wanted,
                without_tenant="" if filters.drill else DRILL_TENANT,
            )
            run.queries += 1
            run.units += units
            run.rows.extend(owned(items, region))
            if not start:
                if month <= self.last:
                    done = True
                    break
                month = _month_before(month)
        if not done:
            run.last_key = {"m": month, "k": start}
            # Not read yet: the rest of ``month`` below ``start``, and older months.
            run.frontier = (plain(start)["resolved_sort"],) if start else (month[2:] + "\uffff",)
        return run
