"""Checkpoint coverage in verification: the periods that should have a signed
checkpoint and have none, and the checkpoints signed late (docs/design.md §7).
"""

from __future__ import annotations

import bisect
from datetime import datetime, timedelta
from typing import Any

from reconciliation import clock
from reconciliation.audit.checkpoints import CHECKPOINT_OVERDUE_S, Period, signed_interval
from reconciliation.audit.models import AuditAction

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


def late_checkpoints(checkpoints: list[dict[str, Any]]) -> list[str]:
    """One line per run of consecutive periods whose checkpoint was signed more than
    ``CHECKPOINT_OVERDUE_S`` after the period ended (``signed_at`` is signed): the task
    was not running (beat, worker or Redis down; the first run after installing), or the
    checkpoint was deleted and the task signed the period again. Either way it vouches
    for the trail as it was when signed, not as it was when the period ended."""
    late: list[tuple[datetime, datetime, timedelta]] = []
    for event in checkpoints:
        interval = signed_interval(event)
        signed_at = (event.get("detail") or {}).get("signed_at")
        if event.get("action") == AuditAction.AUDIT_DIGEST or interval is None or not signed_at:
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
