"""The signed daily digest of the audit trail (DESIGN.md §7).

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

import logging
from datetime import date, timedelta

from reconciliation import clock
from reconciliation.actors import Actor, system_actor
from reconciliation.repositories import Repositories, repositories
from reconciliation.repositories.audit import audit_event_build
from reconciliation.selectors_audit import audit_day_heads
from reconciliation.services.audit.append import audit_append
from reconciliation.services.audit.signing import heads_sha256, key_id, sign

logger = logging.getLogger(__name__)

SYSTEM_STREAM = "SYSTEM"
DIGEST_ACTION = "audit_digest"
DIGEST_PART_ACTION = "audit_digest_part"
# Heads per event: a head is ~100-400 bytes (intent ids run to 255 characters) and an
# item may hold 400 KB, so larger days spill into part events the digest lists.
DIGEST_INLINE_HEADS = 400


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
