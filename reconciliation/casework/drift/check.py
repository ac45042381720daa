"""One run of the ledger drift check over every region, step by step: read what changed
since the checkpoint, compare both sides, confirm the differences, open a case for each
one that held still, and keep the new checkpoint (docs/design.md §6 ``LEDGER_DRIFT``;
the rules are in this package's docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from botocore.exceptions import ClientError
from django.conf import settings

from reconciliation import clock, metrics
from reconciliation.casework.drift.case import RunFacts, drift_case_open, finding_facts
from reconciliation.casework.drift.checkpoint import (
    Checkpoint,
    CheckpointRepository,
    settle_resolved,
)
from reconciliation.casework.drift.compare import (
    ALL,
    Finding,
    Totals,
    differences,
    expected_totals,
    pledge_side,
)
from reconciliation.casework.drift.confirm import moving, unconfirmed_baselines_drop
from reconciliation.casework.drift.read import Reading, Window, changed_pledges, window_read
from reconciliation.dynamo.errors import ErrorCode
from reconciliation.stores import Store


@dataclass
class DriftReport:
    opened: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    changes: int = 0
    queries: int = 0
    skipped: bool = False
    lost_race: bool = False

    def lines(self) -> list[str]:
        if self.skipped:
            return ["ledger drift: checked recently; not due"]
        return [
            f"ledger drift: {self.changes} pledge changes read, "
            f"{len(self.opened)} cases opened, {len(self.duplicates)} cross-region duplicates",
            *(f"  opened {c}" for c in self.opened),
            *(f"  moving, left to the next run: {d}" for d in self.deferred),
        ]


def _due(ckpt: Checkpoint, now: datetime) -> bool:
    """Whether ``LEDGER_DRIFT_INTERVAL_S`` has passed since the last run."""
    if not ckpt.checked_at:
        return True
    age = (now - clock.parse_iso(ckpt.checked_at)).total_seconds()
    return age >= settings.LEDGER_DRIFT_INTERVAL_S


def ledger_drift_check(
    stores: Sequence[Store],
    *,
    home: Callable[[str], Store],
    force: bool = False,
) -> DriftReport:
    """Run the check once over every region (``every_store()``, the first region first;
    ``home`` resolves a claim key's home region). Unless ``force``, a run within
    ``LEDGER_DRIFT_INTERVAL_S`` of the last does nothing but read the checkpoint."""
    report = DriftReport()
    first = stores[0]
    ckpt = CheckpointRepository(first).get()
    now = clock.now()
    if not force and not _due(ckpt, now):
        report.skipped = True
        return report
    window = Window.since(ckpt.watermark, now)
    known = {k for d in ckpt.expected.values() for k in d}
    reading = window_read(stores, window, known)
    report.changes = len(reading.all)
    report.queries = reading.queries
    settle_resolved(ckpt, first)

    by_tag = {s.tag: s for s in stores}
    side = pledge_side(reading.all, changed_pledges(reading.all, home, by_tag))
    totals = expected_totals(ckpt, reading, side)
    new = ckpt.successor(watermark=window.watermark, checked_at=window.until)
    new.expected = totals.settled_expected
    new.pledges = totals.settled_pledges
    new.strays.update(totals.settled_strays)
    findings, moved = _confirmed(
        differences(ckpt, reading, totals, stores), stores, reading, totals, report
    )
    # A baseline read while its fund moved: a later run takes it.
    unconfirmed_baselines_drop(new, ckpt, totals.first_sight & moved, by_tag)

    for intent, at in sorted(side.duplicates.items()):
        if intent not in ckpt.reported:
            report.duplicates.append(intent)  # counted once this run's checkpoint holds
        if at > window.watermark:
            new.reported[intent] = at
    run = RunFacts(ckpt=ckpt, reading=reading, side=side, totals=totals, by_tag=by_tag)
    for finding in findings:
        case_id = drift_case_open(first, finding, finding_facts(finding, run), ckpt.version)
        report.opened.append(case_id)
        new.open[case_id] = {
            "scope": finding.scope,
            "key": finding.key,
            "difference": str(finding.difference),
        }
    _keep(first, new, ckpt.version, report)
    return report


def _confirmed(
    findings: list[Finding],
    stores: Sequence[Store],
    reading: Reading,
    totals: Totals,
    report: DriftReport,
) -> tuple[list[Finding], set[str]]:
    """The ``findings`` whose fund held still on the confirming read (the others are left
    to the next run), and the funds that moved."""
    suspects = totals.first_sight | {f.key for f in findings}
    if not suspects:
        return findings, set()
    confirmation = moving(suspects, stores, reading)
    report.queries += confirmation.queries
    moved = confirmation.moving
    report.deferred.extend(f"{f.scope} {f.key}" for f in findings if f.key in moved)
    return [f for f in findings if f.key not in moved], moved


def _keep(first: Store, new: Checkpoint, seen: int, report: DriftReport) -> None:
    """Write the new checkpoint; only the run whose write wins counts what it found."""
    try:
        CheckpointRepository(first).put(new, seen=seen)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != ErrorCode.CONDITION_FAILED:
            raise
        report.lost_race = True  # another run advanced it; its cases have our ids
        report.duplicates = []  # and it counts the duplicates both runs found
        return
    # Counted only by the run whose checkpoint records them: of two overlapping runs, one
    # (a crash between the write and here loses a count rather than doubling one).
    metrics.CROSS_REGION_DUPLICATES.inc(len(report.duplicates))
    for case_id in report.opened:
        scope = new.open[case_id]["scope"]
        metrics.LEDGER_DRIFT_FOUND.labels("all" if scope == ALL else "region").inc()
