"""Ledger drift detection (issue 15, item 3; docs/design.md §6 ``LEDGER_DRIFT``): a periodic
check that each fund's ledger equals its RECORDED pledges, per region and overall, at a
cost proportional to what changed since its last run.

Rules:

- Every pledge is one transaction: its pledge item, an ADD to one ledger shard of the
  region that wrote it, and its receipt (``PLEDGE_RECORDED``, seq 1 of the region's
  pledge stream); a void adds ``PLEDGE_VOIDED`` to that stream and subtracts from the
  same shard. So what changed since the last run is the receipts and voids in each
  region's ``audit_events.by_day`` index after the checkpoint's watermark (only the
  streams that region owns; replicas are dropped): one Query per day shard.
- Per region and ``fund#currency``: the ledger (its shards, read consistently) must equal
  the expected total, the checkpoint's plus the receipts less the voids since. A
  difference there is the ledger changing without a pledge (or a pledge without its
  ledger), and the case says so; it names no intent, since none explains it.
- Overall: the expected ledgers of every region must equal the sum of RECORDED pledges,
  kept by reading, for each intent that changed, its pledge item in its home region (in
  the region its stream names when the home has none). A receipt counts on the pledge
  side only in the region the pledge item's ``ledger_key`` names: after Global Tables'
  last writer wins, that is the one write the pledges table kept. A receipt of another
  region is the same intent recorded twice: ``dynamo_cross_region_duplicate_detected_total``
  counts it once per intent, and the overall case names it. A changed intent with no
  pledge item at all is named too.
- Whatever the cause, and under whatever names: a receipt found in a region whose stream
  names another region is a replica when that region holds the same event (same event
  id), and otherwise a *stray*, recorded here by a process that took this region for
  the other (a region map that differs between processes: docs/regions.md, "One
  configuration"). Two records of one intent under the *same* names (the untagged stream
  and ledger shard in two regions) look alike to every owner's read, so only this tells
  them apart. A stray counts on the ledger side (``strays``: its shard is one no
  region's own total reads) and on the pledge side only when it is the intent's one
  record; otherwise it is a duplicate, counted and named like any other.
- Settle window: receipts are stamped when the key was claimed (a retry under the same
  token is byte-identical), so one may land up to the 10-minute token window after its
  ``at``; the index is eventually consistent; replication takes its time. The watermark
  therefore stays ``LEDGER_DRIFT_SETTLE_S`` (default 15 min) behind now: each run reads
  from the watermark to now and compares with all of it, but keeps in the checkpoint only
  what is older than the new watermark (the rest is read again next run).
- Confirmation: a difference is read again after ``LEDGER_DRIFT_CONFIRM_MS`` (the whole
  window and the ledger). If anything of that fund moved meanwhile, it is left to the
  next run; a case opens only for a difference that held still. The duplicate counter
  moves only in the run whose checkpoint write wins.
- Reported once: while a scope's case is open, a difference equal to what its open cases
  report (or back to none: finance corrected it first) opens nothing; only what differs
  beyond them opens a new case, for that part. A case resolved as DRIFT_EXPLAINED makes
  its difference part of the scope's ``accepted`` offset for good; DRIFT_CORRECTED does
  not (finance made its own adjustment, so the ledger is expected to match again).
  Nothing here writes money.
- Checkpoint: one item in the first region's ledger table (``#DRIFT#CHECKPOINT``), written
  only if its version is still the one this run read, so of two concurrent runs one
  advances it; case ids derive from scope, fund, currency and that version, so the other
  run's openings are no-ops. Cases live in the first region (a region-wide finding).
- First sight: a ``fund#currency`` the checkpoint does not know yet (every one on the
  first run, which starts ``LEDGER_DRIFT_SETTLE_S`` back) is taken as right as read
  then: its baseline is the ledger less the changes read, kept only if the confirming
  read finds it did not move meanwhile (else it is taken on a later run). A drift older
  than its first sight is therefore not reported; a full read of the pledges table
  would, at the cost of every pledge, and is left to the drill.

Blind spots: a commit landing more than ``LEDGER_DRIFT_SETTLE_S`` after its receipt's
``at`` (a worker stalled that long and still fenced in) shows as a drift that no intent
explains; a fund written to on every run between the two reads is compared only on a
run where it is quiet; a duplicate whose winning region changes after it settled (only
with replication slower than the settle window) may be counted again.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from botocore.exceptions import ClientError
from django.conf import settings

from reconciliation import clock, metrics
from reconciliation.cases.models import Disposition
from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.drift_case import drift_case_open, named_intents, winner
from reconciliation.casework.drift_reads import (
    ALL,
    Change,
    Checkpoint,
    CheckpointRepository,
    ledger_totals,
    pledge_changes,
    strays,
)
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, Pledge, claim_pk
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.stores import Store

logger = logging.getLogger(__name__)

NAMED_INTENTS = 20  # intents a case names at most (the count says how many in all)


def _setting(name: str) -> int:
    """``LEDGER_DRIFT_SETTLE_S`` or ``LEDGER_DRIFT_CONFIRM_MS`` (dashboard/settings.py)."""
    return int(getattr(settings, name))


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


def _pledges(changes: list[Change], home: Callable[[str], Store], by_tag: dict) -> dict:
    """Each changed intent's pledge item: in its home region, else where its stream is."""
    found: dict[str, Pledge | None] = {}
    for change in changes:
        if change.intent_id in found:
            continue
        tenant, _, key = change.intent_id.partition("#")
        pledge = PledgeRepository(home(claim_pk(tenant, OPERATION_CREATE_PLEDGE, key))).get(
            change.intent_id, consistent=True
        )
        if pledge is None and change.region in by_tag:
            pledge = PledgeRepository(by_tag[change.region]).get(change.intent_id)
        found[change.intent_id] = pledge
    return found


def _settle_resolved(ckpt: Checkpoint, store: Store) -> None:
    """Drop the cases resolved since the last run (one GetItem per open drift case); a
    DRIFT_EXPLAINED one leaves its difference accepted for good."""
    for case_id, meta in list(ckpt.open.items()):
        case = CaseRepository(store).get(case_id)
        if case is None or not case.is_resolved:
            continue
        if (case.resolution or {}).get("disposition") == Disposition.DRIFT_EXPLAINED:
            scope = ckpt.accepted.setdefault(meta["scope"], {})
            scope[meta["key"]] = scope.get(meta["key"], Decimal(0)) + Decimal(meta["difference"])
        del ckpt.open[case_id]


def _pending(ckpt: Checkpoint, scope: str, key: str) -> Decimal:
    """What the scope's open cases report for ``key``."""
    open_cases = ckpt.open.values()
    found = (Decimal(m["difference"]) for m in open_cases if (m["scope"], m["key"]) == (scope, key))
    return sum(found, Decimal(0))


def _beyond(ckpt: Checkpoint, scope: str, key: str, diff: Decimal) -> Decimal:
    """The part of ``diff`` (net of accepted differences) no open case reports: none when
    it equals theirs, or when it is gone (corrected before its case was resolved)."""
    pending = _pending(ckpt, scope, key)
    return Decimal(0) if diff in (0, pending) else diff - pending


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
    if not force and ckpt.checked_at:
        age = (now - clock.parse_iso(ckpt.checked_at)).total_seconds()
        if age < settings.LEDGER_DRIFT_INTERVAL_S:
            report.skipped = True
            return report
    until = clock.iso(now)
    settle_to = clock.iso(now - timedelta(seconds=_setting("LEDGER_DRIFT_SETTLE_S")))
    after = ckpt.watermark or settle_to
    watermark = max(after, settle_to)
    by_tag = {s.tag: s for s in stores}
    changes: dict[str, list[Change]] = {}
    foreign: list[Change] = []
    for store in stores:
        changes[store.tag], named_elsewhere, queries = pledge_changes(store, after, until)
        foreign.extend(named_elsewhere)
        report.queries += queries
    every = [c for found in changes.values() for c in found]
    stray = strays(foreign, every, by_tag)
    report.changes = len(every) + len(stray)
    keys = {c.key for c in every + stray} | {k for d in ckpt.expected.values() for k in d}
    ledgers = {s.tag: ledger_totals(s, keys) for s in stores}
    _settle_resolved(ckpt, first)

    pledges = _pledges(every + stray, home, by_tag)
    duplicates: dict[str, str] = {}
    missing: set[str] = set()
    # What each change adds to the pledge side: its amount if the pledge item kept it.
    pledge_delta: dict[Change, Decimal] = {}
    counted: set[str] = set()  # intents whose receipt counts on the pledge side
    for change in every + stray:  # strays last: an owner's record counts first
        pledge = pledges[change.intent_id]
        if pledge is None:
            missing.add(change.intent_id)
            pledge_delta[change] = Decimal(0)
        elif winner(pledge) != change.region or (
            change.is_stray and change.is_receipt and change.intent_id in counted
        ):
            if change.is_receipt:
                duplicates[change.intent_id] = max(change.at, duplicates.get(change.intent_id, ""))
            pledge_delta[change] = Decimal(0)
        else:
            pledge_delta[change] = change.amount
            if change.is_receipt:
                counted.add(change.intent_id)

    new = Checkpoint(
        version=ckpt.version + 1,
        watermark=watermark,
        checked_at=until,
        accepted={s: dict(d) for s, d in ckpt.accepted.items()},
        open=dict(ckpt.open),
        reported={i: at for i, at in ckpt.reported.items() if at > watermark},
        strays=dict(ckpt.strays),
    )
    expected: dict[str, dict[str, Decimal]] = defaultdict(dict)
    first_sight: set[str] = set()
    pledge_side: dict[str, Decimal] = {}
    stray_side: dict[str, Decimal] = {}
    for key in sorted(keys):
        bases = Decimal(0)
        for store in stores:
            mine = [c for c in changes[store.tag] if c.key == key]
            total = sum((c.amount for c in mine), Decimal(0))
            settled = sum((c.amount for c in mine if c.at <= watermark), Decimal(0))
            base = ckpt.expected.get(store.tag, {}).get(key)
            if base is None:  # first sight: the ledger as read is the baseline
                base = ledgers[store.tag][key] - total
                first_sight.add(key)
            bases += base
            expected[store.tag][key] = base + total
            new.expected.setdefault(store.tag, {})[key] = base + settled
        mine = [c for c in every + stray if c.key == key]
        total = sum((pledge_delta[c] for c in mine), Decimal(0))
        settled = sum((pledge_delta[c] for c in mine if c.at <= watermark), Decimal(0))
        base_p = ckpt.pledges.get(key, bases)
        pledge_side[key] = base_p + total
        new.pledges[key] = base_p + settled
        # Ledger additions under another region's names: no region's own total has them.
        strayed = [c for c in stray if c.key == key]
        base_s = ckpt.strays.get(key, Decimal(0))
        stray_side[key] = base_s + sum((c.amount for c in strayed), Decimal(0))
        if stray_side[key] or key in ckpt.strays:
            new.strays[key] = base_s + sum(
                (c.amount for c in strayed if c.at <= watermark), Decimal(0)
            )

    findings: list[tuple[str, str, Decimal]] = []
    for key in sorted(keys):
        for store in stores:
            diff = ledgers[store.tag][key] - expected[store.tag][key]
            diff = _beyond(ckpt, store.tag, key, diff - _accepted(ckpt, store.tag, key))
            if diff:
                findings.append((store.tag, key, diff))
        ledger_side = sum((expected[s.tag][key] for s in stores), stray_side[key])
        overall = ledger_side - pledge_side[key]
        overall = _beyond(ckpt, ALL, key, overall - _accepted(ckpt, ALL, key))
        if overall:
            findings.append((ALL, key, overall))
    suspects = first_sight | {key for _, key, _ in findings}
    moving = _moving(suspects, stores, (after, changes), ledgers, report) if suspects else set()
    report.deferred.extend(f"{scope} {key}" for scope, key, _ in findings if key in moving)
    findings = [f for f in findings if f[1] not in moving]
    for key in first_sight & moving:  # a baseline read while it moved: take it next run
        if key not in ckpt.pledges:
            new.pledges.pop(key, None)
        for tag in by_tag:
            if key not in ckpt.expected.get(tag, {}):
                new.expected.get(tag, {}).pop(key, None)

    for intent, at in sorted(duplicates.items()):
        if intent not in ckpt.reported:
            report.duplicates.append(intent)  # counted once this run's checkpoint holds
        if at > watermark:
            new.reported[intent] = at
    for scope, key, diff in findings:
        fund, _, currency = key.partition("#")
        named = named_intents(scope, key, changes, every + stray, duplicates, missing, pledges)
        for row in named:  # by name: a stored map may not hold the first region's "" key
            row["region_name"] = by_tag[row["region"]].region_name
        facts = {
            "scope": scope,
            "regions": sorted(by_tag[t].region_name for t in by_tag if scope in (ALL, t)),
            "fund": fund,
            "currency": currency,
            "ledger_total": str(
                sum((ledgers[t][key] for t in by_tag if scope in (ALL, t)), Decimal(0))
                + (stray_side[key] if scope == ALL else 0)
            ),
            "pledges_total": str(pledge_side[key] if scope == ALL else expected[scope][key]),
            "already_reported": str(_accepted(ckpt, scope, key) + _pending(ckpt, scope, key)),
            "difference": str(diff),
            "since": after,
            "until": until,
            "intents": named[:NAMED_INTENTS],
            "intent_count": len(named),
        }
        case_id = drift_case_open(first, scope, key, diff, facts, ckpt.version)
        report.opened.append(case_id)
        new.open[case_id] = {"scope": scope, "key": key, "difference": str(diff)}
    try:
        CheckpointRepository(first).put(new, seen=ckpt.version)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        report.lost_race = True  # another run advanced it; its cases have our ids
        report.duplicates = []  # and it counts the duplicates both runs found
        return report
    # Counted only by the run whose checkpoint records them: of two overlapping runs, one
    # (a crash between the write and here loses a count rather than doubling one).
    metrics.CROSS_REGION_DUPLICATES.inc(len(report.duplicates))
    for case_id in report.opened:
        scope = new.open[case_id]["scope"]
        metrics.LEDGER_DRIFT_FOUND.labels("all" if scope == ALL else "region").inc()
    return report


def _accepted(ckpt: Checkpoint, scope: str, key: str) -> Decimal:
    return ckpt.accepted.get(scope, {}).get(key, Decimal(0))


def _moving(
    suspects: set[str],
    stores: Sequence[Store],
    first_read: tuple[str, dict[str, list[Change]]],
    ledgers: dict,
    report: DriftReport,
) -> set[str]:
    """Which of ``suspects`` (funds with a difference, or first seen) moved during the run:
    read after ``LEDGER_DRIFT_CONFIRM_MS``, the window holds a change the first read did
    not, whatever its time stamp (a commit claimed before the run may land after its
    Query: its receipt is back-dated), or the ledger total differs. The window is read
    again, so a suspected difference or a new fund costs a second read of it."""
    time.sleep(_setting("LEDGER_DRIFT_CONFIRM_MS") / 1000)
    after, seen = first_read
    later = clock.iso(clock.now())
    moving: set[str] = set()
    for store in stores:
        found, _, queries = pledge_changes(store, after, later)
        report.queries += queries
        moving |= {c.key for c in set(found) - set(seen[store.tag])}
        again = ledger_totals(store, suspects)
        moving |= {k for k in suspects if again[k] != ledgers[store.tag][k]}
    return moving & suspects
