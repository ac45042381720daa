"""Audit trail services: appending to a stream by its head, the signed daily digest,
verification of chains and digests (DESIGN.md §7).

Bare hashes can be recomputed by anyone who can write the table, so the daily digest is
signed with HMAC-SHA256 under ``AUDIT_SIGNING_KEY``, a key that never goes to DynamoDB.
The digest of day D lists the head ``(stream, seq, hash)`` — the last event dated D —
of every stream with an event dated D, sorted by stream, and the SHA-256 over them.
Verification checks the signature, recomputes that SHA-256 and checks that every listed
event still exists with that hash: editing an event breaks its chain, deleting one
leaves a gap, and deleting a whole stream leaves a listed head missing.

Events dated D that arrive after D's digest (a pledge receipt keeps its claim time) are
not listed by it; they are still covered by their chain and by later digests of their
stream's later days. So a digest proves "at least these heads existed", never "only".
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import random
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta

from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Actor, system_actor
from reconciliation.dynamo.retry import full_jitter_delay
from reconciliation.repositories import Repositories, repositories
from reconciliation.repositories.audit import GENESIS_HASH, audit_event_build, canonical_json
from reconciliation.selectors_audit import (
    ChainStatus,
    audit_day_has_events,
    audit_day_heads,
    audit_streams_touched,
    chain_check,
    stream_chain_status,
)

logger = logging.getLogger(__name__)

SYSTEM_STREAM = "SYSTEM"
DIGEST_ACTION = "audit_digest"
DIGEST_PART_ACTION = "audit_digest_part"
# Heads per event: a head is ~100-400 bytes (intent ids run to 255 characters) and an
# item may hold 400 KB, so larger days spill into part events the digest lists.
DIGEST_INLINE_HEADS = 400
# Without --since, verification walks back day by day (8 small Queries a day, no Scan)
# until this many days in a row are empty, at most VERIFY_LOOKBACK_DAYS, or to the first
# digest if that is older.
VERIFY_QUIET_DAYS = 31
VERIFY_LOOKBACK_DAYS = 400


class AuditAppendContended(Exception):
    """Every attempt to append to a stream lost the race for the next ``seq``."""


# --- signing ---------------------------------------------------------------------------


def signing_key() -> bytes:
    key = settings.AUDIT_SIGNING_KEY
    if not key:
        raise RuntimeError("AUDIT_SIGNING_KEY is empty; digests and manifests need a key")
    return key.encode() if isinstance(key, str) else key


def key_id() -> str:
    """A public fingerprint of the key, so a verifier can tell "wrong key" from "forged"."""
    return hashlib.sha256(b"audit-key-id:" + signing_key()).hexdigest()[:16]


def sign(payload: dict) -> str:
    return hmac.new(signing_key(), canonical_json(payload), hashlib.sha256).hexdigest()


def signature_valid(payload: dict, signature: str) -> bool:
    return hmac.compare_digest(sign(payload), signature or "")


def heads_line(stream: str, seq: int, digest: str) -> bytes:
    return canonical_json([stream, seq, digest]) + b"\n"


def heads_sha256(heads: Iterable[tuple[str, int, str] | list]) -> tuple[int, str]:
    """Count and SHA-256 of sorted heads, one canonical JSON array a line."""
    sha = hashlib.sha256()
    count = 0
    for stream, seq, digest in heads:
        sha.update(heads_line(stream, int(seq), digest))
        count += 1
    return count, sha.hexdigest()


# --- appending by head -------------------------------------------------------------------


def audit_append(
    repos: Repositories,
    *,
    stream: str,
    build: Callable[[int, str], dict | None],
    attempts: int = 8,
) -> dict | None:
    """Append the event ``build(seq, prev_hash)`` after the stream's current head.

    The head is read (Query, newest first, Limit 1) and the event put with
    ``attribute_not_exists``; a writer that lost the race for that ``seq`` reads the new
    head and builds again, so ``build`` may decide there is nothing left to do (None).
    """
    rng = random.Random()
    for attempt in range(attempts):
        head = repos.audit.head(stream)
        seq, prev = (head.seq + 1, head.hash) if head else (1, GENESIS_HASH)
        event = build(seq, prev)
        if event is None:
            return None
        if repos.audit.append(event):
            return event
        time.sleep(full_jitter_delay(attempt, 0.02, 0.5, rng))
    raise AuditAppendContended(f"{stream}: lost the race for the next seq {attempts} times")


# --- daily digest ----------------------------------------------------------------------


def digest_payload(day: str, stream_count: int, sha: str, kid: str) -> dict:
    """What the signature covers; the heads are covered through their SHA-256."""
    return {
        "kind": DIGEST_ACTION,
        "day": day,
        "stream_count": stream_count,
        "heads_sha256": sha,
        "key_id": kid,
    }


def last_digest_day(repos: Repositories) -> date | None:
    event = repos.audit.latest_event(SYSTEM_STREAM, action=DIGEST_ACTION)
    return date.fromisoformat(event["detail"]["day"]) if event else None


def digest_days_due(repos: Repositories, *, today: date | None = None) -> list[date]:
    """Whole UTC days without a digest: from the day after the last digest to yesterday
    (only yesterday when there has never been one). Today is never due: it is not over."""
    today = today or clock.now().date()
    yesterday = today - timedelta(days=1)
    last = last_digest_day(repos)
    first = last + timedelta(days=1) if last else yesterday
    return [first + timedelta(days=i) for i in range((yesterday - first).days + 1)]


def audit_digest_write(
    repos: Repositories, *, day: date, actor: Actor | None = None
) -> dict | None:
    """Write the digest of ``day`` unless one exists; return the digest event or None."""
    actor = actor or system_actor()
    stamp = day.isoformat()

    def already_written() -> bool:
        last = last_digest_day(repos)
        return last is not None and last >= day

    if already_written():
        return None
    heads = audit_day_heads(day, repos=repos)
    count, sha = heads_sha256(heads)
    kid = key_id()
    parts: list[list] = []
    inline = heads if count <= DIGEST_INLINE_HEADS else None
    if inline is None:
        for n, start in enumerate(range(0, count, DIGEST_INLINE_HEADS)):
            chunk = [list(h) for h in heads[start : start + DIGEST_INLINE_HEADS]]

            def build_part(seq: int, prev: str, n: int = n, chunk: list = chunk) -> dict | None:
                if already_written():
                    return None
                return audit_event_build(
                    stream=SYSTEM_STREAM,
                    seq=seq,
                    prev_hash=prev,
                    action=DIGEST_PART_ACTION,
                    actor=actor,
                    detail={"day": stamp, "part": n, "heads": chunk},
                )

            part = audit_append(repos, stream=SYSTEM_STREAM, build=build_part)
            if part is None:
                return None
            parts.append([part["seq"], part["hash"]])
    detail: dict = {
        "day": stamp,
        "stream_count": count,
        "heads_sha256": sha,
        "key_id": kid,
        "signature": sign(digest_payload(stamp, count, sha, kid)),
        "algorithm": "HMAC-SHA256",
    }
    if inline is not None:
        detail["heads"] = [list(h) for h in inline]
    else:
        detail["parts"] = parts

    def build(seq: int, prev: str) -> dict | None:
        if already_written():
            return None  # a concurrent run wrote it: once per day
        return audit_event_build(
            stream=SYSTEM_STREAM,
            seq=seq,
            prev_hash=prev,
            action=DIGEST_ACTION,
            actor=actor,
            detail=detail,
        )

    event = audit_append(repos, stream=SYSTEM_STREAM, build=build)
    if event:
        logger.info("audit digest %s: %d streams, sha256 %s", stamp, count, sha)
    return event


def audit_daily_digest(repos: Repositories | None = None) -> list[str]:
    """Write every due day's digest, oldest first; the days written (none: no-op)."""
    repos = repos or repositories()
    written = []
    for day in digest_days_due(repos):
        if audit_digest_write(repos, day=day):
            written.append(day.isoformat())
    return written


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
    """Recompute chains and check digests; one problem line per broken stream or digest.

    With ``stream``, that chain alone. Otherwise every stream with an event dated
    ``since`` or later (found through ``by_day``) or listed by a digest of such a day is
    verified from its first event, then every digest of those days.
    """
    repos = repos or repositories()
    report = VerifyReport()
    today = clock.now().date()
    system_events = [] if stream else repos.audit.stream_events(SYSTEM_STREAM)
    if stream:
        streams = {stream}
    else:
        since = since or verify_default_since(repos, system_events, today)
        report.since = since
        days = [since + timedelta(days=i) for i in range((today - since).days + 1)]
        streams = audit_streams_touched(days, repos=repos, threads=threads)
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

    def check(name: str) -> ChainStatus:
        if name == SYSTEM_STREAM and system_events:  # read once, above
            return chain_check(name, system_events)
        return stream_chain_status(name, repos=repos)

    ordered = sorted(streams)
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for status in pool.map(check, ordered):
            done += 1
            report.streams += 1
            report.events += status.events
            # A stream listed only by a digest and now empty is the digest's finding.
            if not status.ok and (status.events or stream):
                report.problems.append(status.line())
            if progress:
                progress(done, len(ordered))
    for digest in digests:
        report.digests += 1
        report.problems.extend(digest_verify(repos, digest, by_seq))
    return report
