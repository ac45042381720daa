"""Signed checkpoints of the audit trail, one per period (docs/design.md §7).

Time is cut into periods of ``AUDIT_CHECKPOINT_PERIOD_S`` seconds (default 3600; it must
divide a day, so periods align to UTC midnight). The checkpoint of a period lists the
head ``(stream, seq, hash)`` — the last event dated in the period — of every stream with
an event dated in it, sorted by stream, and the SHA-256 over them; that SHA-256, the
period and the key's fingerprint are signed with HMAC-SHA256 under
``AUDIT_SIGNING_KEY``, a key that never goes to DynamoDB. Checkpoints are ``SYSTEM``
events, so the next period's checkpoint lists the previous one as ``SYSTEM``'s head.

Every period gets a checkpoint, an empty one when nothing happened in it (it still lists
the ``SYSTEM`` head once checkpoints run), so an absent checkpoint is always a finding:
verification names every period since the first checkpoint (and every earlier period
holding an event) that has none.

A checkpoint is written once its period has been over for ``CHECKPOINT_SETTLE_S``: a
pledge receipt keeps its claim time and commits within the claim's lease, so it is
dated in the period by then. An event that lands later still (a commit retried after the
lease) is not listed by its period's checkpoint; its chain, its subject item's stored
head and any later checkpoint of its stream still cover it. So a checkpoint proves "at
least these heads existed", never "only these".

With several regions there is still one checkpoint a period, covering every region: it
lists the heads of every region's streams (each read from the index of the region that
owns it) and is appended to ``SYSTEM`` in the first region, where region-wide records
live. One chain of checkpoints keeps "every period has one" a single, checkable rule and
lets one signature vouch for the whole trail; a checkpoint per region would need a
``SYSTEM`` stream per region and leave a region's missing checkpoint to be noticed by
comparing chains. A region that does not answer fails the run (it is retried), so no
checkpoint is ever signed over part of the trail.

Daily digests written before checkpoints (action ``audit_digest``, ``detail.day``) are
still verified with their own signed payload, and cover every period of their day.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from reconciliation import clock
from reconciliation.actors import Actor, system_actor
from reconciliation.audit.append import audit_append
from reconciliation.audit.models import SYSTEM_STREAM, AuditAction, AuditEvent
from reconciliation.audit.periods import (
    PeriodUnsettled,
    audit_first_event_at,
    audit_period_heads,
)
from reconciliation.audit.repository import AuditRepository, audit_event_build
from reconciliation.audit.signing import heads_sha256, key_id, sign
from reconciliation.stores import Store

logger = logging.getLogger(__name__)

# Checkpoints, and the daily digests written before them (still verified, never written).
SIGNED_ACTIONS = (AuditAction.AUDIT_CHECKPOINT, AuditAction.AUDIT_DIGEST)
# Heads per event: a head is ~100-400 bytes (intent ids run to 255 characters) and an
# item may hold 400 KB, so larger periods spill into part events the checkpoint lists.
CHECKPOINT_INLINE_HEADS = 400
# A period's checkpoint waits this long after the period ends: longer than a claim's
# lease (CLAIM_PENDING_TTL_S, 60 s) and the sweep's grace, within which a pledge receipt
# dated in the period commits.
CHECKPOINT_SETTLE_S = 120
# Verification names a checkpoint missing once its period has been over this long: the
# settle time, the 5-minute beat interval and a retry of the task. A checkpoint signed
# later than this after its period is reported as signed late.
CHECKPOINT_OVERDUE_S = 900
DAY_S = 86400
DEFAULT_PERIOD_S = 3600  # AUDIT_CHECKPOINT_PERIOD_S when settings do not name one
# Shorter periods than the beat interval (300 s) would not shrink the window.
MIN_PERIOD_S = 300


# --- periods ---------------------------------------------------------------------------


def period_setting_problem(value: object) -> str | None:
    """Why ``AUDIT_CHECKPOINT_PERIOD_S`` is unusable, or ``None``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not MIN_PERIOD_S <= value <= DAY_S
        or DAY_S % value
    ):
        return (
            f"AUDIT_CHECKPOINT_PERIOD_S={value!r}: must be whole seconds from {MIN_PERIOD_S} "
            f"to {DAY_S} that divide a day evenly (e.g. 300, 900, 1800, 3600, 21600, 86400)"
        )
    return None


def checkpoint_period_s() -> int:
    """The configured period, validated (ImproperlyConfigured names what is wrong)."""
    value = getattr(settings, "AUDIT_CHECKPOINT_PERIOD_S", DEFAULT_PERIOD_S)
    problem = period_setting_problem(value)
    if problem:
        raise ImproperlyConfigured(problem)
    return value


def _label(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ" if at.second else "%Y-%m-%dT%H:%MZ")


@dataclass(frozen=True, order=True)
class Period:
    """``[start, end)`` in UTC; ``end - start`` divides a day, so it lies in one day."""

    start: datetime
    end: datetime

    @classmethod
    def containing(cls, at: datetime, seconds: int) -> Period:
        midnight = datetime.combine(at.astimezone(UTC).date(), time.min, tzinfo=UTC)
        offset = int((at - midnight).total_seconds())
        start = midnight + timedelta(seconds=offset - offset % seconds)
        return cls(start, start + timedelta(seconds=seconds))

    def following(self) -> Period:
        return Period(self.end, self.end + (self.end - self.start))

    @property
    def label(self) -> str:
        return _label(self.start)


def signed_interval(event: dict[str, Any]) -> tuple[datetime, datetime] | None:
    """``[start, end)`` a checkpoint (or a legacy daily digest) covers; ``None`` if its
    detail names no readable period (verification then reports its signature)."""
    detail = event.get("detail") or {}
    try:
        if event.get("action") == AuditAction.AUDIT_CHECKPOINT:
            return clock.parse_iso(detail["start"]), clock.parse_iso(detail["end"])
        if event.get("action") == AuditAction.AUDIT_DIGEST:
            start = datetime.combine(date.fromisoformat(detail["day"]), time.min, tzinfo=UTC)
            return start, start + timedelta(days=1)
    except (KeyError, TypeError, ValueError):
        return None
    return None


# --- signed payloads ---------------------------------------------------------------------


def checkpoint_payload(
    start: str | None,
    end: str | None,
    signed_at: str | None,
    stream_count: int | None,
    sha: str | None,
    kid: str | None,
) -> dict[str, Any]:
    """What the signature covers; the heads are covered through their SHA-256. The
    signing time is covered too, so a checkpoint signed again after its predecessor was
    deleted cannot pass for one signed on time."""
    return {
        "kind": AuditAction.AUDIT_CHECKPOINT,
        "start": start,
        "end": end,
        "signed_at": signed_at,
        "stream_count": stream_count,
        "heads_sha256": sha,
        "key_id": kid,
    }


def digest_payload(
    day: str | None, stream_count: int | None, sha: str | None, kid: str | None
) -> dict[str, Any]:
    """What a legacy daily digest's signature covers. Verification passes the stored
    values as they are: a missing one is covered as null and fails the signature."""
    return {
        "kind": AuditAction.AUDIT_DIGEST,
        "day": day,
        "stream_count": stream_count,
        "heads_sha256": sha,
        "key_id": kid,
    }


# --- writing -----------------------------------------------------------------------------


def covered_until(store: Store) -> datetime | None:
    """The end of the newest checkpoint (or legacy digest); ``None`` before the first."""
    event = AuditRepository(store).latest_event(SYSTEM_STREAM, action=SIGNED_ACTIONS)
    interval = signed_interval(event) if event else None
    return interval[1] if interval else None


@dataclass
class _SystemSeen:
    """What a checkpoint run knows of the ``SYSTEM`` stream without reading it again:
    the end of the newest checkpoint (``until``) as of the stream's head ``head``. While
    the head is still ``head`` (the next append's ``seq`` is ``head + 1``), nobody has
    written since, so ``until`` still holds; the run's own appends move both on. Any
    other writer's append shows as a ``seq`` further on, and ``until`` is read again.
    A run over N due periods thus reads the newest checkpoint once, not 2N times."""

    head: int
    until: datetime | None

    @classmethod
    def read(cls, store: Store) -> _SystemSeen:
        # The head first: a checkpoint written between the two reads is then seen by
        # ``until`` while ``head`` is older, so the first append reads again; never the
        # other way round (an ``until`` older than the head it is taken for).
        head = AuditRepository(store).head(SYSTEM_STREAM)
        return cls(head.seq if head else 0, covered_until(store))

    def covers(self, period: Period) -> bool:
        return self.until is not None and self.until >= period.end

    def still_covers(self, store: Store, period: Period, *, seq: int) -> bool:
        """Whether ``period`` is covered, as of the head just before ``seq``."""
        if seq != self.head + 1:
            self.head, self.until = seq - 1, covered_until(store)
        return self.covers(period)

    def appended(self, event: dict[str, Any], *, period: Period | None) -> None:
        """This run's own append; a checkpoint (``period``) moves ``until`` on."""
        self.head = int(event["seq"])
        if period is not None:
            self.until = max(self.until or period.end, period.end)


def checkpoint_periods_due(
    store: Store, *, now: datetime | None = None, stores: Sequence[Store] | None = None
) -> list[Period]:
    """Periods without a checkpoint that have been over for ``CHECKPOINT_SETTLE_S``:
    from the end of the newest checkpoint on; when there has never been one, from the
    period of the trail's first event (looked for from the start of yesterday, UTC), and
    none while there is no event. The current period is never due: it is not over."""
    now = now or clock.now()
    start = _chain_start(store, stores, now=now, until=covered_until(store))
    return _periods_due_after(start, now=now)


def _chain_start(
    store: Store, stores: Sequence[Store] | None, *, now: datetime, until: datetime | None
) -> datetime | None:
    """Where checkpoints go on from: the end of the newest one (``until``), or before the
    first, the first event's time. Back-filling empty periods before the first event (a
    fresh install showed a day and a half of them, all "signed late") vouches for
    nothing."""
    if until is not None:
        return until
    yesterday = now.date() - timedelta(days=1)
    return audit_first_event_at([yesterday, now.date()], stores=stores or [store])


def _periods_due_after(until: datetime | None, *, now: datetime) -> list[Period]:
    seconds = checkpoint_period_s()
    if until is None:
        return []  # no checkpoint and no event: nothing to vouch for yet
    # A period that grew since the last checkpoint may start before its end: it is
    # checkpointed whole (overlap is harmless; a gap would not be).
    period = Period.containing(until, seconds)
    due = []
    while period.end + timedelta(seconds=CHECKPOINT_SETTLE_S) <= now:
        due.append(period)
        period = period.following()
    return due


def _checkpoint_event_append(
    store: Store,
    *,
    period: Period,
    action: AuditAction,
    actor: Actor,
    detail: dict[str, Any],
    seen: _SystemSeen,
) -> dict[str, Any] | None:
    """Append one ``SYSTEM`` event of ``period``'s checkpoint (the checkpoint or one of
    its parts); None, nothing written, once a checkpoint covering the period exists."""

    def build(seq: int, prev: str) -> dict[str, Any] | None:
        if seen.still_covers(store, period, seq=seq):
            return None  # a concurrent run wrote it: once per period
        return audit_event_build(
            AuditEvent(action=action, actor=actor, detail=detail),
            stream=SYSTEM_STREAM,
            seq=seq,
            prev_hash=prev,
        )

    event = audit_append(store, stream=SYSTEM_STREAM, build=build)
    if event is not None:
        seen.appended(event, period=period if action == AuditAction.AUDIT_CHECKPOINT else None)
    return event


def _checkpoint_parts_write(
    store: Store,
    *,
    period: Period,
    heads: list[tuple[str, int, str]],
    actor: Actor,
    seen: _SystemSeen,
) -> list[list[Any]] | None:
    """Spill ``heads`` into part events of ``CHECKPOINT_INLINE_HEADS`` heads each; the
    ``[seq, hash]`` of each part, or None if a concurrent run wrote the checkpoint."""
    start = clock.iso(period.start)
    parts: list[list[Any]] = []
    for n, first in enumerate(range(0, len(heads), CHECKPOINT_INLINE_HEADS)):
        chunk = [list(h) for h in heads[first : first + CHECKPOINT_INLINE_HEADS]]
        part = _checkpoint_event_append(
            store,
            period=period,
            action=AuditAction.AUDIT_CHECKPOINT_PART,
            actor=actor,
            detail={"start": start, "part": n, "heads": chunk},
            seen=seen,
        )
        if part is None:
            return None
        parts.append([part["seq"], part["hash"]])
    return parts


def _checkpoint_detail(
    period: Period,
    *,
    heads: list[tuple[str, int, str]],
    count: int,
    sha: str,
    kid: str,
    parts: list[list[Any]] | None,
) -> dict[str, Any]:
    """The checkpoint's detail, signed now: the heads inline, or (``parts``) the part
    events that hold them."""
    start, end = clock.iso(period.start), clock.iso(period.end)
    signed_at = clock.iso(clock.now())
    detail: dict[str, Any] = {
        "start": start,
        "end": end,
        "signed_at": signed_at,
        "stream_count": count,
        "heads_sha256": sha,
        "key_id": kid,
        "signature": sign(checkpoint_payload(start, end, signed_at, count, sha, kid)),
        "algorithm": "HMAC-SHA256",
    }
    if parts is None:
        detail["heads"] = [list(h) for h in heads]
    else:
        detail["parts"] = parts
    return detail


def audit_checkpoint_write(
    store: Store,
    *,
    period: Period,
    actor: Actor | None = None,
    stores: Sequence[Store] | None = None,
    seen: _SystemSeen | None = None,
) -> dict[str, Any] | None:
    """Write the checkpoint of ``period`` in ``store`` (the first region) unless one
    covering it exists, listing the heads of every region's streams (``stores``; just
    ``store``'s without); return the checkpoint event or None. ``seen``: what a run
    writing several periods knows of ``SYSTEM`` already (read here when not given)."""
    actor = actor or system_actor()
    seen = seen or _SystemSeen.read(store)
    if seen.covers(period):
        return None
    heads = audit_period_heads(period.start, period.end, stores=stores or [store])
    count, sha = heads_sha256(heads)
    kid = key_id()
    parts = None
    if count > CHECKPOINT_INLINE_HEADS:
        parts = _checkpoint_parts_write(store, period=period, heads=heads, actor=actor, seen=seen)
        if parts is None:
            return None
    detail = _checkpoint_detail(period, heads=heads, count=count, sha=sha, kid=kid, parts=parts)
    event = _checkpoint_event_append(
        store,
        period=period,
        action=AuditAction.AUDIT_CHECKPOINT,
        actor=actor,
        detail=detail,
        seen=seen,
    )
    if event:
        logger.info("audit checkpoint %s: %d streams, sha256 %s", period.label, count, sha)
    return event


def audit_checkpoint(store: Store, *, stores: Sequence[Store] | None = None) -> list[str]:
    """Write every due period's checkpoint in ``store`` (the first region), covering
    every region of ``stores``, oldest first; the periods written (labels; none: a
    no-op)."""
    written = []
    seen = _SystemSeen.read(store)
    now = clock.now()
    start = _chain_start(store, stores, now=now, until=seen.until)
    for period in _periods_due_after(start, now=now):
        try:
            event = audit_checkpoint_write(store, period=period, stores=stores, seen=seen)
        except PeriodUnsettled as exc:
            # Periods are signed in order: a later one signed now would leave this one
            # without a checkpoint for good. The next run starts here again.
            for row in exc.rows:
                row.warn(f"checkpoint {period.label} and later ones wait for the next run")
            break
        if event:
            written.append(period.label)
    return written
