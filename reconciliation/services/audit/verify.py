"""Verification of the audit trail: chains and signed digests (DESIGN.md §7)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta

from reconciliation import clock
from reconciliation.repositories import Repositories, repositories
from reconciliation.selectors_audit import (
    ChainStatus,
    audit_day_has_events,
    audit_range_index,
    subject_chain_status,
    subject_heads,
)
from reconciliation.services.audit.digests import DIGEST_ACTION, SYSTEM_STREAM, digest_payload
from reconciliation.services.audit.signing import heads_sha256, key_id, signature_valid

# Without --since, verification walks back day by day (8 small Queries a day, no Scan)
# until this many days in a row are empty, at most VERIFY_LOOKBACK_DAYS, or to the first
# digest if that is older.
VERIFY_QUIET_DAYS = 31
VERIFY_LOOKBACK_DAYS = 400


# --- verification ----------------------------------------------------------------------


@dataclass
class VerifyReport:
    problems: list[str] = field(default_factory=list)
    streams: int = 0
    events: int = 0
    digests: int = 0
    since: date | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_default_since(repos: Repositories, system_events: list[dict], today: date) -> date:
    """The earliest day found cheaply: walk back from today until
    ``VERIFY_QUIET_DAYS`` days in a row hold no event (or ``VERIFY_LOOKBACK_DAYS``),
    and take the first digest's day if that is older.

    Once digests run, every day carries at least the previous day's digest event, so
    the walk cannot stop inside the digested era; an older, quieter history is
    reached with ``--since``."""
    bound = today - timedelta(days=VERIFY_LOOKBACK_DAYS)
    earliest, quiet, day = today, 0, today
    while day >= bound and quiet < VERIFY_QUIET_DAYS:
        if audit_day_has_events(day, repos=repos):
            earliest, quiet = day, 0
        else:
            quiet += 1
        day -= timedelta(days=1)
    for event in system_events:
        if event.get("action") == DIGEST_ACTION:
            return min(earliest, date.fromisoformat(event["detail"]["day"]))
    return earliest


def _digest_heads(event: dict, system: dict[int, dict]) -> tuple[list, list[str]]:
    """The heads a digest lists, gathered from its parts, and problems with the parts."""
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


def digest_verify(repos: Repositories, event: dict, system: dict[int, dict]) -> list[str]:
    """Problems with one digest event: parts, SHA-256, signature, listed heads."""
    detail = event.get("detail") or {}
    day = detail.get("day", "?")
    where = f"digest {day} (SYSTEM seq {event.get('seq')})"
    heads, problems = _digest_heads(event, system)
    count, sha = heads_sha256(heads)
    if sha != detail.get("heads_sha256") or count != detail.get("stream_count"):
        problems.append(
            f"heads sha256 mismatch: expected {sha} ({count} streams) stored "
            f"{detail.get('heads_sha256')} ({detail.get('stream_count')} streams)"
        )
    if detail.get("key_id") != key_id():
        problems.append(
            f"signed with key {detail.get('key_id')}, not the configured key {key_id()}"
        )
    else:
        payload = digest_payload(
            day, detail.get("stream_count"), detail.get("heads_sha256"), detail.get("key_id")
        )
        if not signature_valid(payload, detail.get("signature", "")):
            problems.append("signature does not verify")
    stored = repos.audit.hashes_at([(s, int(q)) for s, q, _ in heads])
    for stream, seq, digest in heads:
        found = stored.get((stream, int(seq)))
        if found is None:
            problems.append(f"stream {stream} seq {seq} missing: expected hash {digest}")
        elif found != digest:
            problems.append(f"stream {stream} seq {seq}: expected hash {digest} stored {found}")
    return [f"{where}: {p}" for p in problems]


def audit_verify(
    *,
    stream: str | None = None,
    since: date | None = None,
    repos: Repositories | None = None,
    threads: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Recompute chains, compare them with the heads their subject items store, and
    check digests; one problem line per broken stream or digest.

    With ``stream``, that chain alone. Otherwise every stream with an event dated
    ``since`` or later (found through ``by_day``) or listed by a digest of such a day is
    verified from its first event, then every digest of those days. A pledge that a case
    event of the range names is verified too when its item exists, so a pledge stream
    deleted outright is found through the case that speaks of it.

    Subject items are read before their streams (BatchGetItem, two attributes), so a
    change committed meanwhile can only put a stream ahead of its item, which is then
    read again; never behind.
    """
    repos = repos or repositories()
    report = VerifyReport()
    today = clock.now().date()
    system_events = [] if stream else repos.audit.stream_events(SYSTEM_STREAM)
    candidates: set[str] = set()
    if stream:
        streams = {stream}
    else:
        since = since or verify_default_since(repos, system_events, today)
        report.since = since
        days = [since + timedelta(days=i) for i in range((today - since).days + 1)]
        index = audit_range_index(days, repos=repos, threads=threads)
        streams = index.streams
        candidates = index.referenced
    by_seq = {e["seq"]: e for e in system_events}
    digests = [
        e
        for e in system_events
        if e.get("action") == DIGEST_ACTION
        and since is not None
        and date.fromisoformat((e.get("detail") or {}).get("day", "0001-01-01")) >= since
    ]
    for digest in digests:
        # A stream a digest lists is verified even if every one of its events is gone.
        streams.update(h[0] for h in _digest_heads(digest, by_seq)[0])
    if system_events:
        streams.add(SYSTEM_STREAM)
    heads = subject_heads(streams | candidates, repos=repos)
    # A named pledge without an item is one whose commit never ran: nothing to verify.
    streams.update(c for c in candidates if c in heads)

    def check(name: str) -> ChainStatus:
        if name == SYSTEM_STREAM and system_events:  # read once, above
            events = system_events
        else:
            events = repos.audit.stream_events(name)
        if not events and name not in heads:
            return ChainStatus(name, False, 0, problem="no events")

        def reread():
            return subject_heads([name], repos=repos).get(name)

        return subject_chain_status(name, events, heads.get(name), reread=reread)

    ordered = sorted(streams)
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for status in pool.map(check, ordered):
            done += 1
            report.streams += 1
            report.events += status.events
            # A stream listed only by a digest and now empty is the digest's finding,
            # unless its subject item still stores a head: then the item names it too.
            if not status.ok and (status.events or status.head or stream):
                report.problems.append(status.line())
            if progress:
                progress(done, len(ordered))
    for digest in digests:
        report.digests += 1
        report.problems.extend(digest_verify(repos, digest, by_seq))
    return report
