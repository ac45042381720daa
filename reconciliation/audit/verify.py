"""Verification of the audit trail (DESIGN.md §7): every chain recomputed, every subject
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

import bisect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import partial

from reconciliation import clock
from reconciliation.audit.checkpoints import (
    CHECKPOINT_OVERDUE_S,
    DIGEST_ACTION,
    SIGNED_ACTIONS,
    SYSTEM_STREAM,
    Period,
    checkpoint_payload,
    checkpoint_period_s,
    digest_payload,
    signed_interval,
)
from reconciliation.audit.repository import AuditRepository
from reconciliation.audit.selectors import (
    ChainStatus,
    SubjectHead,
    audit_day_has_events,
    audit_range_index,
    subject_chain_status,
    subject_heads,
)
from reconciliation.audit.signing import heads_sha256, key_id, signature_valid
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


def verify_default_since(store: Store, system_events: list[dict], today: date) -> date:
    """The earliest day found cheaply: walk back from today until
    ``VERIFY_QUIET_DAYS`` days in a row hold no event (or ``VERIFY_LOOKBACK_DAYS``),
    and take the first checkpoint's day if that is older.

    Once checkpoints run, every period carries at least the previous checkpoint, so the
    walk cannot stop inside the checkpointed era; an older, quieter history is reached
    with ``--since``."""
    bound = today - timedelta(days=VERIFY_LOOKBACK_DAYS)
    earliest, quiet, day = today, 0, today
    while day >= bound and quiet < VERIFY_QUIET_DAYS:
        if audit_day_has_events(day, store=store):
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


def _checkpoint_heads(event: dict, system: dict[int, dict]) -> tuple[list, list[str]]:
    """The heads a checkpoint lists, gathered from its parts, and problems with the
    parts."""
    detail = event.get("detail") or {}
    if "heads" in detail:
        return detail["heads"], []
    heads: list = []
    problems = []
    for seq, digest in detail.get("parts", []):
        part = system.get(int(seq))
        if part is None or part.get("hash") != digest:
            problems.append(f"part SYSTEM seq {seq} missing or changed (expected hash {digest})")
            continue
        heads.extend((part.get("detail") or {}).get("heads", []))
    return heads, problems


def checkpoint_verify(
    event: dict, system: dict[int, dict], stored: dict[tuple[str, int], str]
) -> list[str]:
    """Problems with one checkpoint (or legacy digest) event: parts, SHA-256, signature,
    and the listed heads against ``stored`` (the hashes read from their streams)."""
    detail = event.get("detail") or {}
    count = detail.get("stream_count")
    sha = detail.get("heads_sha256")
    kid = detail.get("key_id")
    if event.get("action") == DIGEST_ACTION:
        where = f"digest {detail.get('day', '?')} (SYSTEM seq {event.get('seq')})"
        payload = digest_payload(detail.get("day"), count, sha, kid)
    else:
        interval = signed_interval(event)
        label = Period(*interval).label if interval else repr(detail.get("start"))
        where = f"checkpoint {label} (SYSTEM seq {event.get('seq')})"
        payload = checkpoint_payload(
            detail.get("start"), detail.get("end"), detail.get("signed_at"), count, sha, kid
        )
    heads, problems = _checkpoint_heads(event, system)
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


# --- missing checkpoints -------------------------------------------------------------------


def missing_checkpoints(
    signed: list[tuple[datetime, datetime]],
    *,
    since: datetime,
    now: datetime,
    period_s: int,
    event_periods: set[datetime],
) -> list[str]:
    """One line per run of consecutive periods that should have a checkpoint and have
    none: every period from the first checkpoint on, and every period holding an event
    (before the first checkpoint, or with none left at all), from ``since`` to the last
    period over for ``CHECKPOINT_OVERDUE_S``. A period counts as covered when a
    checkpoint (or a legacy daily digest) spans it; a forged one is reported by its own
    verification."""
    step = timedelta(seconds=period_s)
    overdue_end = now - timedelta(seconds=CHECKPOINT_OVERDUE_S)
    merged: list[list[datetime]] = []
    for start, end in sorted(signed):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [m[0] for m in merged]

    def covered(start: datetime) -> bool:
        n = bisect.bisect_right(starts, start) - 1
        return n >= 0 and start + step <= merged[n][1]

    expected = {p for p in event_periods if p >= since and p + step <= overdue_end}
    if merged:
        period = Period.containing(max(merged[0][0], since), period_s)
        if period.start < max(merged[0][0], since):
            period = period.following()  # only whole periods after the first checkpoint
        while period.end <= overdue_end:
            expected.add(period.start)
            period = period.following()
    missing = sorted(p for p in expected if not covered(p))
    runs: list[list[datetime]] = []
    for start in missing:
        if runs and runs[-1][-1] + step == start:
            runs[-1].append(start)
        else:
            runs.append([start])
    lines = []
    for run in runs:
        first = Period(run[0], run[0] + step)
        if len(run) == 1:
            lines.append(f"missing signed checkpoint for {first.label}")
        else:
            last = Period(run[-1], run[-1] + step)
            lines.append(
                f"missing signed checkpoints for {len(run)} periods of {period_s} s, "
                f"{first.label} to {last.label}"
            )
    return lines


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def late_checkpoints(checkpoints: list[dict]) -> list[str]:
    """One line per run of consecutive periods whose checkpoint was signed more than
    ``CHECKPOINT_OVERDUE_S`` after the period ended (``signed_at`` is signed): the task
    was not running (beat, worker or Redis down; the first run after installing), or the
    checkpoint was deleted and the task signed the period again. Either way it vouches
    for the trail as it was when signed, not as it was when the period ended."""
    late: list[tuple[datetime, datetime, timedelta]] = []
    for event in checkpoints:
        interval = signed_interval(event)
        signed_at = (event.get("detail") or {}).get("signed_at")
        if event.get("action") == DIGEST_ACTION or interval is None or not signed_at:
            continue
        try:
            delay = clock.parse_iso(signed_at) - interval[1]
        except (TypeError, ValueError):
            continue  # its signature check reports it
        if delay > timedelta(seconds=CHECKPOINT_OVERDUE_S):
            late.append((interval[0], interval[1], delay))
    runs: list[list[tuple[datetime, datetime, timedelta]]] = []
    for item in sorted(late):
        if runs and runs[-1][-1][1] == item[0]:
            runs[-1].append(item)
        else:
            runs.append([item])
    lines = []
    for run in runs:
        first, last = Period(run[0][0], run[0][1]), Period(run[-1][0], run[-1][1])
        worst = _duration(max(d for _, _, d in run))
        if len(run) == 1:
            lines.append(
                f"checkpoint {first.label} signed {worst} after its period ended: it "
                "vouches for the trail as it was then"
            )
        else:
            lines.append(
                f"checkpoints for {len(run)} periods, {first.label} to {last.label}, signed "
                f"up to {worst} after their periods ended: they vouch for the trail as it "
                "was then"
            )
    return lines


# --- the whole trail -------------------------------------------------------------------------


def _signed_checkpoints(
    system_events: list[dict], since_start: datetime | None
) -> tuple[dict[int, dict], list[dict], dict[str, set[int]], list[tuple[datetime, datetime]]]:
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
        for name, seq, _ in _checkpoint_heads(checkpoint, by_seq)[0]:
            listed.setdefault(name, set()).add(int(seq))
    return by_seq, checkpoints, listed, [i for i in intervals.values() if i]


def _stream_check(
    name: str,
    *,
    store: Store,
    system_events: list[dict],
    heads: dict[str, SubjectHead],
    listed: dict[str, set[int]],
) -> tuple[ChainStatus, dict[tuple[str, int], str]]:
    """One stream's chain against the head its item stores, and the hashes of its
    events that checkpoints list."""
    if name == SYSTEM_STREAM and system_events:  # read once, by audit_verify
        events = system_events
    else:
        events = AuditRepository(store).stream_events(name)
    wanted = listed.get(name, set())
    found = {(name, e["seq"]): e.get("hash", "") for e in events if e["seq"] in wanted}
    if not events and name not in heads:
        return ChainStatus(name, False, 0, problem="no events"), found

    def reread():
        return subject_heads([name], store=store).get(name)

    return subject_chain_status(name, events, heads.get(name), reread=reread), found


def audit_verify(
    *,
    stream: str | None = None,
    since: date | None = None,
    store: Store,
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

    Subject items are read before their streams (BatchGetItem, two attributes), so a
    change committed meanwhile can only put a stream ahead of its item, which is then
    read again; never behind. Listed heads are checked against the streams as they are
    read: no extra read.
    """
    report = VerifyReport()
    now = clock.now()
    period_s = checkpoint_period_s()
    system_events = [] if stream else AuditRepository(store).stream_events(SYSTEM_STREAM)
    candidates: set[str] = set()
    event_periods: set[datetime] = set()
    since_start = None
    if stream:
        streams = {stream}
    else:
        since = since or verify_default_since(store, system_events, now.date())
        report.since = since
        since_start = datetime.combine(since, time.min, tzinfo=UTC)
        days = [since + timedelta(days=i) for i in range((now.date() - since).days + 1)]
        index = audit_range_index(days, period_s=period_s, store=store, threads=threads)
        streams, candidates, event_periods = index.streams, index.referenced, index.periods
    by_seq, checkpoints, listed, spans = _signed_checkpoints(system_events, since_start)
    streams.update(listed)
    if system_events:
        streams.add(SYSTEM_STREAM)
    heads = subject_heads(streams | candidates, store=store)
    # A named pledge without an item is one whose commit never ran: nothing to verify.
    streams.update(c for c in candidates if c in heads)
    check = partial(
        _stream_check, store=store, system_events=system_events, heads=heads, listed=listed
    )
    ordered = sorted(streams)
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
            if not status.ok and (status.events or status.head or stream):
                report.problems.append(status.line())
            if progress:
                progress(done, len(ordered))
    for checkpoint in checkpoints:
        report.checkpoints += 1
        report.problems.extend(checkpoint_verify(checkpoint, by_seq, stored))
    report.warnings.extend(late_checkpoints(checkpoints))
    if since_start is not None:
        report.problems.extend(
            missing_checkpoints(
                spans,
                since=since_start,
                now=now,
                period_s=period_s,
                event_periods=event_periods,
            )
        )
    return report
