"""The ``by_day`` index read in order for search and export, its cursors, and the fast
decoding of the raw items it yields (docs/design.md §7).

Every listing is a Query: ``by_day`` is keyed ``YYYY-MM-DD#0..7`` (eight shards per day,
so one day is never a hot partition) and sorted by ``at_id`` = ``{at}#{event_id}``. A
time range is read day by day; within a day the eight shards are merged by ``at_id``,
which is unique, so the merged order is total and a position is one ``at_id`` per shard.

With several regions (a list of stores), the reader merges every region's eight shards
of the day, keeping from each region only the streams it owns (:mod:`.regions`), so
Global Tables replicas never double an event; ``at_id`` is unique across regions too.

A cursor carries the day being read and, per shard (per region), the last ``at_id``
consumed (or that the shard is finished). Buffered but unconsumed items are simply read
again on resume, so a cursor is exact however a page ended. With a FilterExpression
DynamoDB may evaluate a whole page and return nothing; the shard's position then moves
to the page's ``LastEvaluatedKey``, so a page that finds nothing still makes progress.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from reconciliation import clock
from reconciliation.audit.filters import AuditFilters
from reconciliation.audit.regions import owned_by
from reconciliation.audit.repository import AuditRepository, DaySelection
from reconciliation.dynamo.calls import TalliedPool
from reconciliation.dynamo.items import RawItem, from_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS
from reconciliation.stores import Store

# Items per Query page when exporting. With prefetch a reader holds at most two pages
# per shard (16 pages), so this bounds an export's memory whatever the range holds.
EXPORT_PAGE_LIMIT = 500
AT_ID_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T[0-9:.]+Z#[A-Za-z0-9._:-]{1,100}$")


class CursorError(ValueError):
    """A cursor was not produced by this search (edited, or for other filters)."""


# --- cursor ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cursor:
    """Where a merged read stopped: the day, and per shard ``None`` (not started), an
    ``at_id`` (consumed up to and including it) or ``True`` (finished). With several
    regions the shards run region by region and ``regions`` names the regions' tags in
    order, so a cursor is only accepted by a search over the same regions (one region:
    ``()``, and the cursor reads as it always did)."""

    day: date
    shards: tuple[str | bool | None, ...]
    regions: tuple[str, ...] = ()

    def encode(self, filters: AuditFilters) -> str:
        data: dict[str, Any] = {
            "v": 1,
            "f": filters.fingerprint(),
            "d": self.day.isoformat(),
            "s": self.shards,
        }
        if self.regions:
            data["r"] = self.regions
        blob = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, filters: AuditFilters, *, regions: tuple[str, ...] = ()) -> Cursor:
        try:
            padded = text + "=" * (-len(text) % 4)
            data = json.loads(base64.urlsafe_b64decode(padded.encode()))
            day = date.fromisoformat(data["d"])
            shards = tuple(data["s"])
            fingerprint = data["f"]
            version = data["v"]
            named = tuple(data.get("r", ()))
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            raise CursorError("the cursor is not one this search produced")
        if version != 1 or fingerprint != filters.fingerprint():
            raise CursorError("the cursor belongs to a different search; start again")
        if named != regions:
            raise CursorError("the cursor was made over other regions; start again")
        width = AUDIT_DAY_SHARDS * max(1, len(regions))
        if len(shards) != width or not all(
            s is None or s is True or (isinstance(s, str) and AT_ID_RE.match(s)) for s in shards
        ):
            raise CursorError("the cursor is not one this search produced")
        if not filters.since.date() <= day <= filters.until.date():
            raise CursorError("the cursor lies outside the searched range")
        return cls(day, shards, regions)


# --- fast decoding ---------------------------------------------------------------------


def _number(text: str) -> int | Decimal:
    try:
        return int(text)
    except ValueError:
        value = Decimal(text)
        return int(value) if value == value.to_integral_value() else value


def decode_value(value: Mapping[str, Any]) -> Any:
    """One attribute value as a plain value, as :func:`from_item` would return it.

    An export decodes every attribute of every event; this skips boto3's
    ``TypeDeserializer`` dispatch for the types events actually hold.
    """
    ((kind, raw),) = value.items()
    if kind == "S":
        return raw
    if kind == "N":
        return _number(raw)
    if kind == "M":
        return {k: decode_value(v) for k, v in raw.items()}
    if kind == "L":
        return [decode_value(v) for v in raw]
    if kind == "BOOL":
        return raw
    if kind == "NULL":
        return None
    return from_item({"v": value})["v"]


def decode_event(item: RawItem) -> dict[str, Any]:
    return {k: decode_value(v) for k, v in item.items()}


# --- the merged day reader ---------------------------------------------------------------


@dataclass
class _Shard:
    key: str
    source: int  # which region's repository reads it
    position: str | None  # last at_id consumed (exclusive resume bound)
    done: bool
    start: str | None = None  # inclusive bound on the first query of an edge day
    buffer: deque[dict[str, Any]] = field(default_factory=deque)
    lek_at: str | None = None  # at_id of the LastEvaluatedKey of the buffered page
    final: bool = False  # the buffered page is the shard's last
    pending: Future[tuple[list[dict[str, Any]], dict[str, Any] | None]] | None = None


def cursor_regions(stores: Sequence[Store]) -> tuple[str, ...]:
    """What a cursor over ``stores`` names: the regions' tags, or ``()`` for one region."""
    return tuple(s.tag for s in stores) if len(stores) > 1 else ()


@dataclass(frozen=True)
class Paging:
    """How a :class:`DayIndexReader` reads: ``page_limit`` items a Query; at most
    ``max_queries`` Queries (none: no bound), which bounds a search page; with
    ``prefetch``, each shard's next page is asked for in a thread as soon as a page
    arrives, so DynamoDB's time overlaps the caller's work (memory stays bounded at two
    pages per shard)."""

    page_limit: int = EXPORT_PAGE_LIMIT
    max_queries: int | None = None
    prefetch: bool = False


class DayIndexReader:
    """Events of a time range in ``at_id`` order (or reverse), merged over the day shards.

    ``audit`` is one region's repository (every event it holds), or the stores of every
    region: then each region's shards are read in that region and only its own streams
    kept.

    Iterating yields raw DynamoDB items, read as ``paging`` says (:class:`Paging`); when
    its query budget stops the reader early, :attr:`stopped_early` is set and
    :meth:`cursor` says where to resume.
    """

    def __init__(
        self,
        audit: AuditRepository | Sequence[Store],
        filters: AuditFilters,
        *,
        descending: bool = False,
        cursor: Cursor | None = None,
        paging: Paging = Paging(),
    ):
        self.sources: list[tuple[AuditRepository, Callable[[str], bool] | None]]
        self.regions: tuple[str, ...]
        if isinstance(audit, AuditRepository):
            self.sources, self.regions = [(audit, None)], ()
        else:
            self.sources = [(AuditRepository(s), owned_by(s, audit)) for s in audit]
            self.regions = cursor_regions(audit)
        self.width = AUDIT_DAY_SHARDS * len(self.sources)
        self.filters = filters
        self.descending = descending
        self.page_limit = paging.page_limit
        self.max_queries = paging.max_queries
        self.prefetch = paging.prefetch
        expression, names, values = filters.expression()
        self.selection = DaySelection(expression, names or None, values or None)
        self.days = filters.days(descending=descending)
        self.start_cursor = cursor
        self.queries = 0
        self.days_done = 0
        self.stopped_early = False
        self._day: date | None = None
        self._shards: list[_Shard] = []
        self._pool: TalliedPool | None = None
        # at_id is "{at}#{event_id}": an event at exactly ``until`` sorts after the bare
        # timestamp, so the upper bound carries a suffix above any event id character.
        self._lo = clock.iso(filters.since)
        self._hi = clock.iso(filters.until) + "#~"

    # progress for long exports: whole days done plus the share of shards finished today
    @property
    def fraction_done(self) -> float:
        if not self.days:
            return 1.0
        today = sum(1 for s in self._shards if s.done) / len(self._shards) if self._shards else 0
        return min(1.0, (self.days_done + today) / len(self.days))

    def cursor(self) -> Cursor | None:
        """Where the next page starts; ``None`` when the range is exhausted."""
        if self._day is None:
            return self.start_cursor
        if all(s.done for s in self._shards) and not any(s.buffer for s in self._shards):
            later = self.days[self.days.index(self._day) + 1 :]
            return Cursor(later[0], (None,) * self.width, self.regions) if later else None
        return Cursor(
            self._day,
            tuple(True if s.done else s.position for s in self._shards),
            self.regions,
        )

    def __iter__(self) -> Generator[dict[str, Any], None, None]:
        try:
            yield from self._iterate()
        finally:
            if self._pool is not None:
                # Prefetches not started are dropped; one already sent is waited for (a
                # Query's time at most), so the page's Server-Timing counts every call
                # it made and no read outlives the page.
                self._pool.shutdown(wait=True, cancel_futures=True)

    def _iterate(self) -> Iterator[dict[str, Any]]:
        days = self.days
        resume = self.start_cursor
        if resume is not None:
            days = days[days.index(resume.day) :]
            self.days_done = self.days.index(resume.day)
        if self.prefetch:
            # Its reads count in the page's Server-Timing (dashboard/server_timing.py).
            self._pool = TalliedPool(self.width, thread_name_prefix="audit-read")
        for day in days:
            yield from self._day_items(day, resume if resume and resume.day == day else None)
            resume = None
            if self.stopped_early:
                return
            self.days_done += 1

    def _day_items(self, day: date, resume: Cursor | None) -> Iterator[dict[str, Any]]:
        """One day's events, merged over its shards; stops with ``stopped_early`` set when
        the query budget runs out."""
        self._day = day
        self._shards = self._open_day(day, resume)
        if self._pool is not None:
            for shard in self._shards:
                if not shard.done:
                    self._prefetch(shard, shard.position, shard.start)
        pick = max if self.descending else min
        while True:
            for shard in self._shards:
                while not shard.done and not shard.buffer:
                    if not self._refill(shard):
                        self.stopped_early = True
                        return
            live = [s for s in self._shards if s.buffer]
            if not live:
                return
            shard = pick(live, key=lambda s: s.buffer[0]["at_id"]["S"])
            item = shard.buffer.popleft()
            shard.position = item["at_id"]["S"]
            if not shard.buffer:
                self._page_consumed(shard)
            yield item

    def _open_day(self, day: date, resume: Cursor | None) -> list[_Shard]:
        stamp = day.isoformat()
        edge = self._hi if self.descending else self._lo
        start = edge if edge[:10] == stamp else None
        shards = []
        for n in range(self.width):
            state = resume.shards[n] if resume else None
            shards.append(
                _Shard(
                    key=f"{stamp}#{n % AUDIT_DAY_SHARDS}",
                    source=n // AUDIT_DAY_SHARDS,
                    position=state if isinstance(state, str) else None,
                    done=state is True,
                    start=start,
                )
            )
        return shards

    def _page_consumed(self, shard: _Shard) -> None:
        if shard.final:
            shard.done = True
        elif shard.lek_at is not None:
            # Everything up to the LastEvaluatedKey was evaluated; unmatched items
            # were filtered out by DynamoDB, so the position may move past them.
            shard.position = shard.lek_at

    def _query(
        self, shard: _Shard, after: str | None, start: str | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        return self.sources[shard.source][0].day_page(
            shard.key,
            descending=self.descending,
            after=after,
            start=start,
            limit=self.page_limit,
            select=self.selection,
        )

    def _budget_left(self) -> bool:
        return self.max_queries is None or self.queries < self.max_queries

    def _prefetch(self, shard: _Shard, after: str | None, start: str | None) -> None:
        if self._pool is None or not self._budget_left():
            return
        self.queries += 1
        shard.pending = self._pool.submit(self._query, shard, after, start)

    def _refill(self, shard: _Shard) -> bool:
        """Fetch the shard's next page into its buffer; False if the budget is spent."""
        if shard.pending is not None:
            items, lek = shard.pending.result()
            shard.pending = None
        else:
            if not self._budget_left():
                return False
            self.queries += 1
            items, lek = self._query(shard, shard.position, shard.start)
        shard.start = None
        shard.lek_at = lek["at_id"]["S"] if lek else None
        shard.final = lek is None
        # Stop at the far end of the range (the near end is in the key condition). A
        # replica of another region's stream is passed over like a filtered item.
        owns = self.sources[shard.source][1]
        kept = []
        for item in items:
            at_id = item["at_id"]["S"]
            if (at_id < self._lo) if self.descending else (at_id > self._hi):
                shard.final = True
                shard.lek_at = None
                break
            if owns is None or owns(item["stream"]["S"]):
                kept.append(item)
        shard.buffer.extend(kept)
        if not shard.final:
            self._prefetch(shard, shard.lek_at, None)
        if not shard.buffer:
            self._page_consumed(shard)
        return True
