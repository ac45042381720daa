"""Verification of the audit trail (docs/design.md §7): every chain recomputed, every subject
stream compared with the head its item stores, every signed checkpoint checked, and
every past period that should have a checkpoint and has none named.

What each check catches:

- the chain (seq 1..n, hashes, ``prev_hash`` links): an event edited, or deleted from
  the middle of its stream;
- the stored head (``audit_seq``/``audit_head`` on the case or pledge item, written in
  the same transaction as each event): the newest events of a stream deleted or
  rewritten, or events appended past it;
- the signed checkpoints: a whole stream deleted, or rewritten consistently (item
  included), after its period's checkpoint was signed;
- the missing checkpoints: checkpoints themselves deleted (the newest ones, or all of
  ``SYSTEM``).

What none of them can catch is written down in ``docs/audit.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import partial
from typing import Any

from reconciliation import clock
from reconciliation.audit.chains import (
    ChainStatus,
    SubjectHead,
    subject_chain_status,
    subject_heads,
)
from reconciliation.audit.checkpoints import (
    SIGNED_ACTIONS,
    Period,
    checkpoint_payload,
    checkpoint_period_s,
    digest_payload,
    signed_interval,
)
from reconciliation.audit.models import SYSTEM_STREAM, AuditAction
from reconciliation.audit.periods import audit_day_has_events, audit_range_index, subjects_written
from reconciliation.audit.regions import stream_home
from reconciliation.audit.repository import AuditRepository
from reconciliation.audit.signing import heads_sha256, key_id, signature_valid
from reconciliation.audit.verify_periods import late_checkpoints, missing_checkpoints
from reconciliation.stores import Store

# Without --since, verification walks back day by day (8 small Queries a day, no Scan)
# until this many days in a row are empty, at most VERIFY_LOOKBACK_DAYS, or to the first
# checkpoint if that is older.
VERIFY_QUIET_DAYS = 31
VERIFY_LOOKBACK_DAYS = 400


@dataclass
class VerifyReport:
    problems: list[str] = field(default_factory=list)
    streams: int = 0
    events: int = 0
    checkpoints: int = 0  # legacy daily digests included
    since: date | None = None
    # Not failures: checkpoints signed late vouch only for the trail as it was then.
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


__all__ = [
    "VERIFY_LOOKBACK_DAYS",
    "VERIFY_QUIET_DAYS",
    "VerifyReport",
    "audit_verify",
    "checkpoint_verify",
    "late_checkpoints",
    "missing_checkpoints",
    "verify_default_since",
]


def verify_default_since(
    store: Store,
    system_events: list[dict[str, Any]],
    today: date,
    *,
    stores: Sequence[Store] | None = None,
) -> date:
    """The earliest day found cheaply: walk back from today until
    ``VERIFY_QUIET_DAYS`` days in a row hold no event (or ``VERIFY_LOOKBACK_DAYS``),
    and take the first checkpoint's day if that is older.

    Once checkpoints run, every period carries at least the previous checkpoint, so the
    walk cannot stop inside the checkpointed era; an older, quieter history is reached
    with ``--since``."""
    bound = today - timedelta(days=VERIFY_LOOKBACK_DAYS)
    earliest, quiet, day = today, 0, today
    while day >= bound and quiet < VERIFY_QUIET_DAYS:
        if audit_day_has_events(day, stores=stores or [store]):
            earliest, quiet = day, 0
        else:
            quiet += 1
        day -= timedelta(days=1)
    for event in system_events:
        interval = signed_interval(event) if event.get("action") in SIGNED_ACTIONS else None
        if interval:
            return min(earliest, interval[0].date())
    return earliest


# --- one checkpoint ----------------------------------------------------------------------


@dataclass(frozen=True)
class _ListedHeads:
    heads: list[Any]  # [stream, seq, hash] of each stream the checkpoint lists
    problems: list[str]  # parts missing or changed


def _checkpoint_heads(event: dict[str, Any], system: dict[int, dict[str, Any]]) -> _ListedHeads:
    """The heads a checkpoint lists, gathered from its parts, and problems with the
    parts."""
    detail = event.get("detail") or {}
    if "heads" in detail:
        return _ListedHeads(detail["heads"], [])
    heads: list[Any] = []
    problems = []
    for seq, digest in detail.get("parts", []):
        part = system.get(int(seq))
        if part is None or part.get("hash") != digest:
            problems.append(f"part SYSTEM seq {seq} missing or changed (expected hash {digest})")
            continue
        heads.extend((part.get("detail") or {}).get("heads", []))
    return _ListedHeads(heads, problems)


def checkpoint_verify(
    event: dict[str, Any], system: dict[int, dict[str, Any]], stored: dict[tuple[str, int], str]
) -> list[str]:
    """Problems with one checkpoint (or legacy digest) event: parts, SHA-256, signature,
    and the listed heads against ``stored`` (the hashes read from their streams)."""
    detail = event.get("detail") or {}
    count = detail.get("stream_count")
    sha = detail.get("heads_sha256")
    kid = detail.get("key_id")
    if event.get("action") == AuditAction.AUDIT_DIGEST:
        where = f"digest {detail.get('day', '?')} (SYSTEM seq {event.get('seq')})"
        payload = digest_payload(detail.get("day"), count, sha, kid)
    else:
        interval = signed_interval(event)
        label = Period(*interval).label if interval else repr(detail.get("start"))
        where = f"checkpoint {label} (SYSTEM seq {event.get('seq')})"
        payload = checkpoint_payload(
            detail.get("start"), detail.get("end"), detail.get("signed_at"), count, sha, kid
        )
    listed = _checkpoint_heads(event, system)
    heads, problems = listed.heads, listed.problems
    recount, resha = heads_sha256(heads)
    if resha != sha or recount != count:
        problems.append(
            f"heads sha256 mismatch: expected {resha} ({recount} streams) stored "
            f"{sha} ({count} streams)"
        )
    if kid != key_id():
        problems.append(f"signed with key {kid}, not the configured key {key_id()}")
    elif not signature_valid(payload, detail.get("signature", "")):
        problems.append("signature does not verify")
    for stream, seq, digest in heads:
        found = stored.get((stream, int(seq)))
        if found is None:
            problems.append(f"stream {stream} seq {seq} missing: expected hash {digest}")
        elif found != digest:
            problems.append(f"stream {stream} seq {seq}: expected hash {digest} stored {found}")
    return [f"{where}: {p}" for p in problems]


# --- the whole trail -------------------------------------------------------------------------


@dataclass(frozen=True)
class _SignedCheckpoints:
    """What the ``SYSTEM`` stream says there is to verify (:func:`_signed_checkpoints`)."""

    by_seq: dict[int, dict[str, Any]]  # ``SYSTEM`` by seq
    checkpoints: list[dict[str, Any]]  # the checkpoints (and digests) to verify
    listed: dict[str, set[int]]  # the seqs they list, by stream
    spans: list[tuple[datetime, datetime]]  # the intervals every readable one covers


def _signed_checkpoints(
    system_events: list[dict[str, Any]], since_start: datetime | None
) -> _SignedCheckpoints:
    """``SYSTEM`` by seq; the checkpoints (and digests) to verify, those of a period
    ending after ``since_start`` (none for one stream); the seqs they list, by stream;
    the intervals every readable checkpoint covers."""
    by_seq = {e["seq"]: e for e in system_events}
    signed = [e for e in system_events if e.get("action") in SIGNED_ACTIONS]
    intervals = {e["seq"]: signed_interval(e) for e in signed}
    checkpoints = [
        e
        for e in signed
        if since_start is not None
        and ((interval := intervals[e["seq"]]) is None or interval[1] > since_start)
    ]
    listed: dict[str, set[int]] = {}
    for checkpoint in checkpoints:
        # A stream a checkpoint lists is verified even if every one of its events is gone.
        for name, seq, _ in _checkpoint_heads(checkpoint, by_seq).heads:
            listed.setdefault(name, set()).add(int(seq))
    return _SignedCheckpoints(by_seq, checkpoints, listed, [i for i in intervals.values() if i])


def _stream_check(
    name: str,
    *,
    stores: Sequence[Store],
    system_events: list[dict[str, Any]],
    heads: dict[str, SubjectHead],
    listed: dict[str, set[int]],
) -> tuple[ChainStatus, dict[tuple[str, int], str]]:
    """One stream's chain against the head its item stores, and the hashes of its
    events that checkpoints list, all read in the region that owns the stream."""
    store = stream_home(name, stores)
    if name == SYSTEM_STREAM and system_events:  # read once, by audit_verify
        events = system_events
    else:
        events = AuditRepository(store).stream_events(name)
    wanted = listed.get(name, set())
    found = {(name, e["seq"]): e.get("hash", "") for e in events if e["seq"] in wanted}
    if not events and name not in heads:
        return ChainStatus(name, False, 0, problem="no events"), found

    def reread() -> SubjectHead | None:
        return subject_heads([name], store=store).get(name)

    return subject_chain_status(name, events, heads.get(name), reread=reread), found


def audit_verify(
    *,
    stream: str | None = None,
    since: date | None = None,
    store: Store,
    stores: Sequence[Store] | None = None,
    threads: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Recompute chains, compare them with the heads their subject items store, check
    the signed checkpoints and name missing ones; one problem line per broken stream,
    checkpoint or run of missing periods.

    With ``stream``, that chain (and its stored head) alone. Otherwise every stream with
    an event dated ``since`` or later (found through ``by_day``) or listed by a
    checkpoint of such a period is verified from its first event, then every such
    checkpoint. A pledge that a case event of the range names is verified too when its
    item exists, so a pledge stream deleted outright is found through the case that
    speaks of it.

    ``store`` is the first region (``SYSTEM``, its checkpoints); ``stores`` every region
    (``store`` alone without): streams are found in every region's index, and each
    stream and its subject item are read in the region that owns them, so a broken link
    in any region is named.

    Subject items are read before their streams (BatchGetItem, two attributes), so a
    change committed meanwhile can only put a stream ahead of its item, which is then
    read again; never behind. Listed heads are checked against the streams as they are
    read: no extra read.
    """
    report = VerifyReport()
    regions = list(stores) if stores else [store]
    now = clock.now()
    period_s = checkpoint_period_s()
    system_events = [] if stream else AuditRepository(store).stream_events(SYSTEM_STREAM)
    if stream:
        found = _Range(streams={stream})
    else:
        found = _range_read(store, system_events, since, regions, now=now, threads=threads)
        report.since = found.since
    streams, candidates = found.streams, found.candidates
    signed = _signed_checkpoints(system_events, found.start)
    listed = signed.listed
    streams.update(listed)
    if system_events:
        streams.add(SYSTEM_STREAM)
    heads = subject_heads(streams | candidates, stores=regions)
    # A named pledge without an item is one whose commit never ran: nothing to verify.
    streams.update(c for c in candidates if c in heads)
    check = partial(
        _stream_check, stores=regions, system_events=system_events, heads=heads, listed=listed
    )
    stored = _chains_check(
        sorted(streams), check, report, threads=threads, progress=progress, named=bool(stream)
    )
    _checkpoints_check(report, signed, stored, found, now=now, period_s=period_s)
    return report


@dataclass
class _Range:
    """The streams to verify, the subjects named in the range (their items may name a
    stream deleted outright), the periods that hold events, and the range's start."""

    streams: set[str]
    candidates: set[str] = field(default_factory=set)
    periods: set[datetime] = field(default_factory=set)
    since: date | None = None
    start: datetime | None = None


def _checkpoints_check(
    report: VerifyReport,
    signed: _SignedCheckpoints,
    stored: dict[tuple[str, int], str],
    found: _Range,
    *,
    now: datetime,
    period_s: int,
) -> None:
    """Each signed checkpoint against the heads stored, those signed late, and, over a
    range, the periods that have events and no checkpoint."""
    for checkpoint in signed.checkpoints:
        report.checkpoints += 1
        report.problems.extend(checkpoint_verify(checkpoint, signed.by_seq, stored))
    report.warnings.extend(late_checkpoints(signed.checkpoints))
    if found.start is not None:
        report.problems.extend(
            missing_checkpoints(
                signed.spans,
                since=found.start,
                now=now,
                period_s=period_s,
                event_periods=found.periods,
            )
        )


def _range_read(
    store: Store,
    system_events: list[dict[str, Any]],
    since: date | None,
    regions: list[Store],
    *,
    now: datetime,
    threads: int,
) -> _Range:
    """Every stream with an event dated ``since`` (by default: from the checkpoints on)
    or later, found through every region's ``by_day`` index, and the subjects written in
    the range."""
    since = since or verify_default_since(store, system_events, now.date(), stores=regions)
    days = [since + timedelta(days=i) for i in range((now.date() - since).days + 1)]
    index = audit_range_index(days, period_s=checkpoint_period_s(), stores=regions, threads=threads)
    # Subjects written in the range, from their own tables: a case or pledge whose
    # whole stream was deleted before any checkpoint listed it is named by its item.
    written = subjects_written(days, stores=regions, threads=threads)
    return _Range(
        streams=index.streams,
        candidates=index.referenced | written,
        periods=index.periods,
        since=since,
        start=datetime.combine(since, time.min, tzinfo=UTC),
    )


def _chains_check(
    ordered: list[str],
    check: Callable[[str], tuple[ChainStatus, dict[tuple[str, int], str]]],
    report: VerifyReport,
    *,
    threads: int,
    progress: Callable[[int, int], None] | None,
    named: bool,
) -> dict[tuple[str, int], str]:
    """Check each stream's chain (``threads`` at a time), counting and noting in
    ``report``; returns the hashes of the events checkpoints list, as stored."""
    stored: dict[tuple[str, int], str] = {}
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for status, found in pool.map(check, ordered):
            done += 1
            report.streams += 1
            report.events += status.events
            stored.update(found)
            # A stream listed only by a checkpoint and now empty is the checkpoint's
            # finding, unless its subject item still stores a head: the item names it too.
            if not status.ok and (status.events or status.head or named):
                report.problems.append(status.line())
            if progress:
                progress(done, len(ordered))
    return stored
