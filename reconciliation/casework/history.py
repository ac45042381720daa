"""Lists beyond the open queues: a person's own open cases ("My cases") and the resolved
cases (DESIGN.md §8: /queues/resolved/), each one Query per page plus a signed cursor.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

from django.core import signing

from reconciliation import clock
from reconciliation.cases.models import resolved_month
from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.selectors import (
    MAX_PAGE,
    MAX_QUERIES_PER_PAGE,
    CaseRow,
    InvalidFilter,
    QueuePage,
    _row,
)
from reconciliation.stores import Store

# --- "My cases" (open cases assigned to one person) -------------------------------------

MINE_CURSOR_SALT = "reconciliation.mine-cursor"


def assigned_page(
    assignee: str, *, cursor: str | None = None, limit: int = 50, store: Store
) -> QueuePage:
    """``assignee``'s open cases in every queue, oldest first: one Query of the
    ``open_by_assignee`` index, ``Limit`` plus a cursor signed for this person."""
    limit = max(1, min(limit, MAX_PAGE))
    start = None
    if cursor:
        try:
            payload = signing.loads(cursor, salt=MINE_CURSOR_SALT)
        except signing.BadSignature:
            raise InvalidFilter({"cursor": "not a cursor this server issued"}) from None
        if payload.get("a") != assignee:
            raise InvalidFilter({"cursor": "issued for someone else"})
        start = payload["k"]
    items, start, units = CaseRepository(store).query_assigned(
        assignee, limit=limit, start_key=start
    )
    rows = [replace(_row(i), queue=i.get("queue", "")) for i in items]
    next_cursor = (
        signing.dumps({"a": assignee, "k": start}, salt=MINE_CURSOR_SALT, compress=True)
        if start
        else None
    )
    return QueuePage("MINE", rows, next_cursor, units, 1)


# --- resolved cases (DESIGN.md §8: /queues/resolved/) -----------------------------------

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

    def fingerprint(self) -> str:
        raw = json.dumps([self.resolved_by, self.how, self.fund, self.since, self.until])
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
    store: Store,
) -> QueuePage:
    """Resolved cases, newest first: the ``resolved_by_time`` index, month by month from
    the newest, ``Limit`` plus a signed cursor (month and index key) like queue pages."""
    filters = filters or ResolvedFilters()
    limit = max(1, min(limit, MAX_PAGE))
    month = resolved_month(filters.until or clock.iso(clock.now()))
    start: dict | None = None
    if cursor:
        try:
            payload = signing.loads(cursor, salt=RESOLVED_CURSOR_SALT)
        except signing.BadSignature:
            raise InvalidFilter({"cursor": "not a cursor this server issued"}) from None
        if payload.get("f") != filters.fingerprint():
            raise InvalidFilter({"cursor": "issued for other filters"})
        month, start = payload["m"], payload.get("k")
    if filters.since:
        last = resolved_month(filters.since)
    else:
        last = month
        for _ in range(RESOLVED_MONTHS_BACK):
            last = _month_before(last)
    wanted = {"resolved_by": filters.resolved_by, "resolved_how": filters.how, "fund": filters.fund}
    rows: list[CaseRow] = []
    consumed, queries = 0.0, 0
    done = False
    while len(rows) < limit and queries < MAX_QUERIES_PER_PAGE + RESOLVED_MONTHS_BACK:
        items, start, units = CaseRepository(store).query_resolved(
            month,
            limit=limit - len(rows),
            start_key=start,
            after=filters.since or None,
            before=filters.until or None,
            filters=wanted,
        )
        queries += 1
        consumed += units
        rows.extend(_row(i) for i in items)
        if not start:
            if month <= last:
                done = True
                break
            month = _month_before(month)
    next_cursor = None
    if not done:
        next_cursor = signing.dumps(
            {"f": filters.fingerprint(), "m": month, "k": start},
            salt=RESOLVED_CURSOR_SALT,
            compress=True,
        )
    return QueuePage("RESOLVED", rows, next_cursor, consumed, queries)
