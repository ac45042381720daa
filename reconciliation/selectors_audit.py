"""Reads of the audit trail: search and export order over the ``by_day`` index, cursors,
the chain status of a stream (DESIGN.md §7).

Every listing is a Query: ``by_day`` is keyed ``YYYY-MM-DD#0..7`` (eight shards per day,
so one day is never a hot partition) and sorted by ``at_id`` = ``{at}#{event_id}``. A
time range is read day by day; within a day the eight shards are merged by ``at_id``,
which is unique, so the merged order is total and a position is one ``at_id`` per shard.

A cursor carries the day being read and, per shard, the last ``at_id`` consumed (or that
the shard is finished). Buffered but unconsumed items are simply read again on resume,
so a cursor is exact however a page ended. With a FilterExpression DynamoDB may evaluate
a whole page and return nothing; the shard's position then moves to the page's
``LastEvaluatedKey``, so a page that finds nothing still makes progress.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from reconciliation import clock
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS
from reconciliation.repositories import Repositories, repositories
from reconciliation.repositories.audit import GENESIS_HASH, AuditRepository, event_hash

SEARCH_PAGE_SIZE = 50
# A search page stops after this many Queries even if the page is not full (sparse
# filters over a long range); the cursor then continues where the search stopped.
SEARCH_QUERY_BUDGET = 96
SEARCH_MAX_DAYS = 366
# Items per Query page when exporting. With prefetch a reader holds at most two pages
# per shard (16 pages), so this bounds an export's memory whatever the range holds.
EXPORT_PAGE_LIMIT = 500
# Bounds of a date filter: no event predates the system, and day arithmetic on a bound
# (the day before, the day after, a default week) must stay inside datetime's years 1-9999
# (year 1 raised OverflowError, in a request and in a background export's worker).
EARLIEST_DAY = date(2000, 1, 1)
LATEST_DAY = date(2999, 12, 31)
AT_ID_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T[0-9:.]+Z#[A-Za-z0-9._:-]{1,100}$")


class FilterError(ValueError):
    """A search or export filter is malformed; the message says which and why."""


class CursorError(ValueError):
    """A cursor was not produced by this search (edited, or for other filters)."""


# --- filters ---------------------------------------------------------------------------


def parse_bound(value: str, *, end: bool) -> datetime:
    """``YYYY-MM-DD`` (the whole day: from its first or to its last microsecond) or an
    ISO-8601 date-time with a zone (``Z`` or an offset), as an aware UTC datetime."""
    value = (value or "").strip()
    out_of_range = f"{value!r} is out of range: dates run from {EARLIEST_DAY} to {LATEST_DAY}"
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            moment = datetime.combine(day, time.max if end else time.min, tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{value!r} is not a date (YYYY-MM-DD) or an ISO date-time")
    if moment.tzinfo is None:
        raise FilterError(f"{value!r} has no time zone; add Z or an offset")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # an offset that moves 0001-01-01 or 9999-12-31 off the calendar
        raise FilterError(out_of_range) from None
    if not EARLIEST_DAY <= moment.date() <= LATEST_DAY:
        raise FilterError(out_of_range)
    return moment


@dataclass(frozen=True)
class AuditFilters:
    """What a search or export selects. ``since``/``until`` are inclusive UTC bounds.

    ``actor`` is typed by the user and matches a username or an e-mail address;
    ``performed_by`` is imposed by the server (finance staff see only their own events)
    and matches the username only.
    """

    since: datetime
    until: datetime
    actor: str = ""
    action: str = ""
    case_id: str = ""
    intent_id: str = ""
    performed_by: str = ""

    @classmethod
    def build(
        cls,
        *,
        since: str = "",
        until: str = "",
        actor: str = "",
        action: str = "",
        case_id: str = "",
        intent_id: str = "",
        performed_by: str = "",
        default_days: int = 7,
        max_days: int | None = SEARCH_MAX_DAYS,
    ) -> AuditFilters:
        today = clock.now().date()
        until_at = (
            parse_bound(until, end=True) if until else datetime.combine(today, time.max, tzinfo=UTC)
        )
        since_at = (
            parse_bound(since, end=False)
            if since
            else datetime.combine(
                until_at.date() - timedelta(days=default_days - 1), time.min, tzinfo=UTC
            )
        )
        if since_at > until_at:
            raise FilterError("the range starts after it ends")
        span = (until_at.date() - since_at.date()).days + 1
        if max_days is not None and span > max_days:
            raise FilterError(f"the range covers {span} days; at most {max_days} at a time")
        for name, text in (("actor", actor), ("action", action), ("case id", case_id)):
            if len(text) > 300:
                raise FilterError(f"{name} is too long")
        if len(intent_id) > 600:
            raise FilterError("intent id is too long")
        return cls(
            since=since_at,
            until=until_at,
            actor=actor.strip(),
            action=action.strip(),
            case_id=case_id.strip(),
            intent_id=intent_id.strip(),
            performed_by=performed_by,
        )

    def as_dict(self) -> dict[str, str]:
        """Plain values for audit events, manifests and cursors (empty filters left out)."""
        out = {"since": clock.iso(self.since), "until": clock.iso(self.until)}
        for name in ("actor", "action", "case_id", "intent_id", "performed_by"):
            value = getattr(self, name)
            if value:
                out[name] = value
        return out

    def fingerprint(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def days(self, *, descending: bool = False) -> list[date]:
        first, last = self.since.date(), self.until.date()
        out = [first + timedelta(days=i) for i in range((last - first).days + 1)]
        return out[::-1] if descending else out

    def expression(self) -> tuple[str | None, dict[str, str], dict[str, dict]]:
        """FilterExpression, names and values for the non-key filters (None if none)."""
        parts: list[str] = []
        names: dict[str, str] = {}
        values: dict[str, dict] = {}
        if self.actor:
            names.update({"#actor": "actor", "#un": "username", "#em": "email"})
            values[":actor"] = {"S": self.actor}
            parts.append("(#actor.#un = :actor OR #actor.#em = :actor)")
        if self.performed_by:
            names.update({"#actor": "actor", "#un": "username"})
            values[":me"] = {"S": self.performed_by}
            parts.append("#actor.#un = :me")
        if self.action:
            names["#action"] = "action"
            values[":action"] = {"S": self.action}
            parts.append("#action = :action")
        if self.case_id:
            names["#case"] = "case_id"
            values[":case"] = {"S": self.case_id}
            parts.append("#case = :case")
        if self.intent_id:
            names["#intent"] = "intent_id"
            values[":intent"] = {"S": self.intent_id}
            parts.append("#intent = :intent")
        return (" AND ".join(parts) or None), names, values


# --- cursor ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cursor:
    """Where a merged read stopped: the day, and per shard ``None`` (not started), an
    ``at_id`` (consumed up to and including it) or ``True`` (finished)."""

    day: date
    shards: tuple[str | bool | None, ...]

    def encode(self, filters: AuditFilters) -> str:
        blob = json.dumps(
            {"v": 1, "f": filters.fingerprint(), "d": self.day.isoformat(), "s": self.shards},
            separators=(",", ":"),
        ).encode()
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, filters: AuditFilters) -> Cursor:
        try:
            padded = text + "=" * (-len(text) % 4)
            data = json.loads(base64.urlsafe_b64decode(padded.encode()))
            day = date.fromisoformat(data["d"])
            shards = tuple(data["s"])
            fingerprint = data["f"]
            version = data["v"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise CursorError("the cursor is not one this search produced")
        if version != 1 or fingerprint != filters.fingerprint():
            raise CursorError("the cursor belongs to a different search; start again")
        if len(shards) != AUDIT_DAY_SHARDS or not all(
            s is None or s is True or (isinstance(s, str) and AT_ID_RE.match(s)) for s in shards
        ):
            raise CursorError("the cursor is not one this search produced")
        if not filters.since.date() <= day <= filters.until.date():
            raise CursorError("the cursor lies outside the searched range")
        return cls(day, shards)


# --- fast decoding ---------------------------------------------------------------------


def _number(text: str) -> int | Decimal:
    try:
        return int(text)
    except ValueError:
        value = Decimal(text)
        return int(value) if value == value.to_integral_value() else value


def decode_value(value: dict) -> Any:
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


def decode_event(item: dict) -> dict:
    return {k: decode_value(v) for k, v in item.items()}


# --- the merged day reader ---------------------------------------------------------------


@dataclass
class _Shard:
    key: str
    position: str | None  # last at_id consumed (exclusive resume bound)
    done: bool
    start: str | None = None  # inclusive bound on the first query of an edge day
    buffer: deque = field(default_factory=deque)
    lek_at: str | None = None  # at_id of the LastEvaluatedKey of the buffered page
    final: bool = False  # the buffered page is the shard's last
    pending: Future | None = None


class DayIndexReader:
    """Events of a time range in ``at_id`` order (or reverse), merged over the day shards.

    Iterating yields raw DynamoDB items. ``max_queries`` bounds a search page; when it
    stops the reader early, :attr:`stopped_early` is set and :meth:`cursor` says where to
    resume. ``prefetch`` asks for each shard's next page in a thread as soon as a page
    arrives, so DynamoDB's time overlaps the caller's work; memory stays bounded at two
    pages per shard.
    """

    def __init__(
        self,
        audit: AuditRepository,
        filters: AuditFilters,
        *,
        descending: bool = False,
        cursor: Cursor | None = None,
        page_limit: int = EXPORT_PAGE_LIMIT,
        max_queries: int | None = None,
        prefetch: bool = False,
    ):
        self.audit = audit
        self.filters = filters
        self.descending = descending
        self.page_limit = page_limit
        self.max_queries = max_queries
        self.prefetch = prefetch
        self.filter_expression, self.names, self.values = filters.expression()
        self.days = filters.days(descending=descending)
        self.start_cursor = cursor
        self.queries = 0
        self.days_done = 0
        self.stopped_early = False
        self._day: date | None = None
        self._shards: list[_Shard] = []
        self._pool: ThreadPoolExecutor | None = None
        # at_id is "{at}#{event_id}": an event at exactly ``until`` sorts after the bare
        # timestamp, so the upper bound carries a suffix above any event id character.
        self._lo = clock.iso(filters.since)
        self._hi = clock.iso(filters.until) + "#~"

    # progress for long exports: whole days done plus the share of shards finished today
    @property
    def fraction_done(self) -> float:
        if not self.days:
            return 1.0
        today = sum(1 for s in self._shards if s.done) / AUDIT_DAY_SHARDS if self._shards else 0
        return min(1.0, (self.days_done + today) / len(self.days))

    def cursor(self) -> Cursor | None:
        """Where the next page starts; ``None`` when the range is exhausted."""
        if self._day is None:
            return self.start_cursor
        if all(s.done for s in self._shards) and not any(s.buffer for s in self._shards):
            later = self.days[self.days.index(self._day) + 1 :]
            return Cursor(later[0], (None,) * AUDIT_DAY_SHARDS) if later else None
        return Cursor(
            self._day,
            tuple(True if s.done else s.position for s in self._shards),
        )

    def __iter__(self) -> Iterator[dict]:
        try:
            yield from self._iterate()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)

    def _iterate(self) -> Iterator[dict]:
        days = self.days
        resume = self.start_cursor
        if resume is not None:
            days = days[days.index(resume.day) :]
            self.days_done = self.days.index(resume.day)
        if self.prefetch:
            self._pool = ThreadPoolExecutor(AUDIT_DAY_SHARDS, thread_name_prefix="audit-read")
        pick = max if self.descending else min
        for day in days:
            self._day = day
            self._shards = self._open_day(day, resume if resume and resume.day == day else None)
            resume = None
            if self._pool is not None:
                for shard in self._shards:
                    if not shard.done:
                        self._prefetch(shard, shard.position, shard.start)
            while True:
                for shard in self._shards:
                    while not shard.done and not shard.buffer:
                        if not self._refill(shard):
                            self.stopped_early = True
                            return
                live = [s for s in self._shards if s.buffer]
                if not live:
                    break
                shard = pick(live, key=lambda s: s.buffer[0]["at_id"]["S"])
                item = shard.buffer.popleft()
                shard.position = item["at_id"]["S"]
                if not shard.buffer:
                    self._page_consumed(shard)
                yield item
            self.days_done += 1

    def _open_day(self, day: date, resume: Cursor | None) -> list[_Shard]:
        stamp = day.isoformat()
        edge = self._hi if self.descending else self._lo
        start = edge if edge[:10] == stamp else None
        shards = []
        for n in range(AUDIT_DAY_SHARDS):
            state = resume.shards[n] if resume else None
            shards.append(
                _Shard(
                    key=f"{stamp}#{n}",
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

    def _query(self, key: str, after: str | None, start: str | None) -> tuple[list, dict | None]:
        return self.audit.day_page(
            key,
            descending=self.descending,
            after=after,
            start=start,
            limit=self.page_limit,
            filter_expression=self.filter_expression,
            names=self.names or None,
            values=self.values or None,
        )

    def _budget_left(self) -> bool:
        return self.max_queries is None or self.queries < self.max_queries

    def _prefetch(self, shard: _Shard, after: str | None, start: str | None) -> None:
        if self._pool is None or not self._budget_left():
            return
        self.queries += 1
        shard.pending = self._pool.submit(self._query, shard.key, after, start)

    def _refill(self, shard: _Shard) -> bool:
        """Fetch the shard's next page into its buffer; False if the budget is spent."""
        if shard.pending is not None:
            items, lek = shard.pending.result()
            shard.pending = None
        else:
            if not self._budget_left():
                return False
            self.queries += 1
            items, lek = self._query(shard.key, shard.position, shard.start)
        shard.start = None
        shard.lek_at = lek["at_id"]["S"] if lek else None
        shard.final = lek is None
        # Stop at the far end of the range (the near end is in the key condition).
        kept = []
        for item in items:
            at_id = item["at_id"]["S"]
            if (at_id < self._lo) if self.descending else (at_id > self._hi):
                shard.final = True
                shard.lek_at = None
                break
            kept.append(item)
        shard.buffer.extend(kept)
        if not shard.final:
            self._prefetch(shard, shard.lek_at, None)
        if not shard.buffer:
            self._page_consumed(shard)
        return True


# --- search ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainStatus:
    stream: str
    ok: bool
    events: int
    seq: int | None = None  # first broken link
    problem: str = ""
    expected: str = ""
    stored: str = ""
    # The chain links, but it disagrees with the head its subject item stores (the
    # newest events deleted, the stream rewritten, or the item gone): ``problem`` says
    # how, ``detail`` gives the hashes.
    head: bool = False
    detail: str = ""

    def line(self) -> str:
        if self.head:
            return f"{self.stream}: {self.problem}" + (f" ({self.detail})" if self.detail else "")
        text = f"{self.stream} seq {self.seq}: {self.problem}"
        if self.expected or self.stored:
            text += f": expected {self.expected or '-'} stored {self.stored or '-'}"
        return text


@dataclass(frozen=True)
class AuditRow:
    at: str
    stream: str
    seq: int
    event_id: str
    action: str
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

    @classmethod
    def from_event(cls, event: dict, chain_ok: bool | None = None) -> AuditRow:
        actor = event.get("actor") or {}
        return cls(
            at=event.get("at", ""),
            stream=event.get("stream", ""),
            seq=int(event.get("seq", 0)),
            event_id=event.get("event_id", ""),
            action=event.get("action", ""),
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
        )


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


def audit_search(
    *,
    filters: AuditFilters,
    cursor: str | None = None,
    page_size: int = SEARCH_PAGE_SIZE,
    repos: Repositories | None = None,
    with_chains: bool = True,
) -> AuditPage:
    """One page of matching events, newest first, and the chain status of their streams."""
    repos = repos or repositories()
    start = Cursor.decode(cursor, filters) if cursor else None
    reader = DayIndexReader(
        repos.audit,
        filters,
        descending=True,
        cursor=start,
        page_limit=max(page_size * 2, 100),
        max_queries=SEARCH_QUERY_BUDGET,
        prefetch=True,
    )
    events: list[dict] = []
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
    chains = chain_statuses(streams, repos=repos) if with_chains else {}
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


# --- chain status ----------------------------------------------------------------------


def chain_check(stream: str, events: list[dict]) -> ChainStatus:
    """The first broken link of ``stream`` given its stored events in ``seq`` order:
    a gap in ``seq``, a stored hash that is not the hash of the event, or a
    ``prev_hash`` that is not its predecessor's hash."""
    expected_seq, previous = 1, GENESIS_HASH
    for event in events:
        seq = int(event.get("seq", 0))
        if seq != expected_seq:
            return ChainStatus(
                stream,
                False,
                len(events),
                seq=expected_seq,
                problem=f"gap: seq {expected_seq} missing (next stored seq {seq})",
            )
        recomputed = event_hash(event)
        if recomputed != event.get("hash"):
            return ChainStatus(
                stream,
                False,
                len(events),
                seq=seq,
                problem="hash mismatch",
                expected=recomputed,
                stored=str(event.get("hash", "")),
            )
        if event.get("prev_hash") != previous:
            return ChainStatus(
                stream,
                False,
                len(events),
                seq=seq,
                problem="prev_hash does not link to the previous event",
                expected=previous,
                stored=str(event.get("prev_hash", "")),
            )
        previous = event["hash"]
        expected_seq += 1
    return ChainStatus(stream, True, len(events))


def stream_chain_status(stream: str, *, repos: Repositories | None = None) -> ChainStatus:
    """Chain status of one stream, e.g. ``CASE#{case_id}`` for the case page."""
    repos = repos or repositories()
    events = repos.audit.stream_events(stream)
    if not events:
        return ChainStatus(stream, False, 0, problem="no events")
    return chain_check(stream, events)


# --- stored heads (subject items) -----------------------------------------------------

SUBJECT_KINDS = {"CASE#": "case", "PLEDGE#": "pledge"}


@dataclass(frozen=True)
class SubjectHead:
    """The head a subject item stores beside its state, written in the same transaction
    as each of its events: ``audit_seq`` and ``audit_head``."""

    kind: str  # "case" or "pledge"
    seq: int
    hash: str


def subject_of(stream: str) -> tuple[str, str] | None:
    """``("case", case_id)`` or ``("pledge", intent_id)``; ``None`` for streams without a
    subject item (``SYSTEM``, ``EXPORT#…``, ``STAFF#…``)."""
    for prefix, kind in SUBJECT_KINDS.items():
        if stream.startswith(prefix):
            return kind, stream.removeprefix(prefix)
    return None


def subject_heads(
    streams: set[str] | list[str], *, repos: Repositories | None = None
) -> dict[str, SubjectHead]:
    """The stored head of each subject stream whose item exists, keyed by stream: one
    BatchGetItem a hundred items per table, two attributes each, consistent reads."""
    repos = repos or repositories()
    ids: dict[str, list[str]] = {"case": [], "pledge": []}
    for stream in streams:
        subject = subject_of(stream)
        if subject:
            ids[subject[0]].append(subject[1])
    heads: dict[str, SubjectHead] = {}
    for kind, prefix, found in (
        ("case", "CASE#", repos.cases.heads(ids["case"]) if ids["case"] else {}),
        ("pledge", "PLEDGE#", repos.pledges.heads(ids["pledge"]) if ids["pledge"] else {}),
    ):
        for key, (seq, digest) in found.items():
            heads[prefix + key] = SubjectHead(kind, seq, digest)
    return heads


def subject_chain_status(
    stream: str,
    events: list[dict],
    head: SubjectHead | None,
    *,
    reread: Callable[[], SubjectHead | None] | None = None,
) -> ChainStatus:
    """:func:`chain_check`, then the stream against the head its subject item stores.

    Read the item *before* the stream: an event and its item's new head are written in
    one transaction, so the item read first can only be behind the stream read after
    it, never ahead. A stream that ends before the stored head lost its newest events;
    one that runs past it raced a live change, so the item is read again (``reread``)
    and only a stream still past it is reported.
    """
    status = chain_check(stream, events)
    subject = subject_of(stream)
    if not status.ok or subject is None:
        return status
    noun = subject[0]
    if head is None:
        if not events:
            return status
        return ChainStatus(
            stream,
            False,
            len(events),
            problem=f"{len(events)} events but no {noun} item to store the stream's head",
            head=True,
        )
    last = int(events[-1]["seq"]) if events else 0
    if last > head.seq and reread is not None:
        head = reread() or head
    by_seq = {int(e["seq"]): e for e in events}
    at_head = by_seq.get(head.seq)
    if not events and head.seq == 0:
        return status  # an item that never had an event (none is written that way)
    if not events:
        problem = f"the {noun} item stores audit_seq {head.seq} but the stream has no events"
        detail = f"audit_head {head.hash or '-'}"
    elif last < head.seq:
        problem = f"the {noun} item stores audit_seq {head.seq} but the stream ends at seq {last}"
        detail = f"audit_head {head.hash or '-'}, stream's last hash {events[-1].get('hash')}"
    elif at_head is None or at_head.get("hash") != head.hash:
        problem = f"the {noun} item's audit_head is not the hash of seq {head.seq}"
        stored = at_head.get("hash") if at_head else "-"
        detail = f"audit_head {head.hash or '-'}, stream's seq {head.seq} hash {stored}"
    elif last > head.seq:
        problem = f"the stream runs to seq {last}, past the {noun} item's audit_seq {head.seq}"
        detail = f"audit_head {head.hash or '-'}"
    else:
        return status
    return ChainStatus(
        stream, False, len(events), seq=head.seq, problem=problem, head=True, detail=detail
    )


def case_chain_status(
    case_id: str,
    events: list[dict],
    head: SubjectHead,
    *,
    repos: Repositories | None = None,
) -> ChainStatus:
    """The case page's status: its timeline against the head its item stores (read
    before the timeline; read again only if the timeline runs past it)."""
    stream = f"CASE#{case_id}"

    def reread() -> SubjectHead | None:
        return subject_heads([stream], repos=repos).get(stream)

    return subject_chain_status(stream, events, head, reread=reread)


def chain_statuses(
    streams: set[str] | list[str], *, repos: Repositories | None = None, threads: int = 8
) -> dict[str, ChainStatus]:
    """Chain status of each stream, read in parallel (each is one Query, or a few)."""
    repos = repos or repositories()
    ordered = sorted(streams)
    if not ordered:
        return {}

    def check(stream: str) -> ChainStatus:
        return stream_chain_status(stream, repos=repos)

    if len(ordered) == 1:
        return {ordered[0]: check(ordered[0])}
    with ThreadPoolExecutor(min(threads, len(ordered))) as pool:
        return dict(zip(ordered, pool.map(check, ordered), strict=True))


# --- period heads (checkpoints) and the range index (verification) ----------------------


def _shard_items(
    repos: Repositories, day_shard: str, projection: str, names: dict[str, str]
) -> Iterator[dict]:
    """Every item of one ``by_day`` shard, oldest first, only the projected attributes."""
    after = None
    while True:
        items, lek = repos.audit.day_page(
            day_shard, after=after, projection=projection, names=names
        )
        yield from items
        if lek is None:
            return
        after = lek["at_id"]["S"]


def audit_period_heads(
    start: datetime, end: datetime, *, repos: Repositories | None = None
) -> list[tuple[str, int, str]]:
    """``(stream, seq, hash)`` of the last event dated in ``[start, end)`` of every stream
    with one, sorted by stream: eight Queries (and their pages) over the ``by_day``
    shards of that day, bounded to the period, keys and hash only. The period lies
    within one UTC day."""
    repos = repos or repositories()
    # at_id is "{at}#{event_id}": every at_id of an event at or after ``end`` sorts
    # after the bare timestamp, so ``hi`` is exclusive of them.
    lo, hi = clock.iso(start), clock.iso(end)
    heads: dict[str, tuple[int, str]] = {}
    names = {"#s": "stream", "#q": "seq", "#h": "hash"}
    for n in range(AUDIT_DAY_SHARDS):
        shard = f"{start.date().isoformat()}#{n}"
        for item in repos.audit.period_items(shard, lo, hi, projection="#s, #q, #h", names=names):
            stream, seq = item["stream"]["S"], int(item["seq"]["N"])
            if seq > heads.get(stream, (0, ""))[0]:
                heads[stream] = (seq, item["hash"]["S"])
    return [(s, q, h) for s, (q, h) in sorted(heads.items())]


def audit_day_has_events(day: date, *, repos: Repositories | None = None) -> bool:
    """Whether any event is dated ``day``: up to eight one-item Queries."""
    repos = repos or repositories()
    for n in range(AUDIT_DAY_SHARDS):
        items, _ = repos.audit.day_page(f"{day.isoformat()}#{n}", limit=1, projection="at_id")
        if items:
            return True
    return False


@dataclass
class RangeIndex:
    """What the ``by_day`` index says about a range of days: the streams with events in
    it, the pledges its case events name (``intent_id``), and the start of every
    checkpoint period holding an event."""

    streams: set[str] = field(default_factory=set)
    referenced: set[str] = field(default_factory=set)  # PLEDGE#… streams
    periods: set[datetime] = field(default_factory=set)


def audit_range_index(
    days: list[date],
    *,
    period_s: int = 86400,
    repos: Repositories | None = None,
    threads: int = 8,
) -> RangeIndex:
    """Every stream with an event on one of ``days``, every pledge stream a case event of
    those days names, and every period of ``period_s`` seconds (aligned to midnight)
    with an event (Queries over ``by_day``, three attributes, no Scan)."""
    repos = repos or repositories()
    names = {"#s": "stream", "#i": "intent_id"}

    def one(day_shard: str) -> RangeIndex:
        found = RangeIndex()
        offsets: set[int] = set()
        for item in _shard_items(repos, day_shard, "#s, #i, at_id", names):
            stream = item["stream"]["S"]
            found.streams.add(stream)
            if stream.startswith("CASE#") and "intent_id" in item:
                found.referenced.add(f"PLEDGE#{item['intent_id']['S']}")
            at = item["at_id"]["S"]  # YYYY-MM-DDTHH:MM:SS.ffffffZ#…, sliced, not parsed
            second = int(at[11:13]) * 3600 + int(at[14:16]) * 60 + int(at[17:19])
            offsets.add(second - second % period_s)
        midnight = datetime.combine(date.fromisoformat(day_shard[:10]), time.min, tzinfo=UTC)
        found.periods = {midnight + timedelta(seconds=o) for o in offsets}
        return found

    keys = [f"{d.isoformat()}#{n}" for d in days for n in range(AUDIT_DAY_SHARDS)]
    index = RangeIndex()
    with ThreadPoolExecutor(threads) as pool:
        for found in pool.map(one, keys):
            index.streams |= found.streams
            index.referenced |= found.referenced
            index.periods |= found.periods
    return index
