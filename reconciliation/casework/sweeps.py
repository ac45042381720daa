"""Detection sweeps (docs/design.md §3, §6).

The stuck-claim sweep queries ``idempotency_keys.pending_by_expiry`` shard by shard for
PENDING claims whose lease ran out more than ``STUCK_GRACE_S`` ago: its cost grows with
stuck claims, not with all claims. Each candidate is re-read consistently (the index is
eventually consistent), the durable pledge is read, and then either the case is opened
and resolved at once (the pledge committed: evidence-based auto-resolution) or a
``STUCK_PENDING`` case is opened for a human and the claim leaves the index.

A second pass re-checks every open case about an intent (each claim case type, in its
own queue or escalated) against the evidence, and resolves those whose question the
evidence now answers (the pledge is recorded with the case's own request), so staff only
see cases that need a person.

Last, when it is due, the ledger drift check (:mod:`reconciliation.casework.drift`): each
fund's ledger against its recorded pledges, at the cost of what changed since its last run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseChanged, CaseError
from reconciliation.cases.models import Case, ClientOutcome, CommitRetry
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import (
    CASE_TYPES,
    CaseType,
    Disposition,
    ErrorKind,
    Queue,
    ReasonCode,
    RetryStatus,
)
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.drift.check import ledger_drift_check
from reconciliation.casework.evidence import EvidenceRefused
from reconciliation.casework.retries import enqueue_retry
from reconciliation.claims.models import Claim, ClaimStatus
from reconciliation.claims.opening import CaseCause, case_build, case_open
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository, ClaimTaken
from reconciliation.dynamo.errors import error_code, log_fields
from reconciliation.dynamo.tables import PENDING_SHARDS
from reconciliation.stores import Store

logger = logging.getLogger(__name__)

AUTO_REASON = ReasonCode.EVIDENCE_CONFIRMS
AUTO_TEXT = "Automatic: a consistent read found the pledge recorded with this request."
# Every queue an open case about an intent can sit in. Whatever its type, a claim case
# asks whether the donor's intent is recorded: once a consistent read finds the pledge
# with the case's own request, the evidence has answered it (a late worker's cancelled
# commit, a token refused to a stalled worker, a timeout whose commit applied). The
# stalled worker itself is an operational signal (metrics, logs), not casework. A fund's
# LEDGER_DRIFT case is never closed automatically: only finance records answer it.
RECHECK_QUEUES = (
    Queue.STUCK_PENDING,
    Queue.AMBIGUOUS_TIMEOUT,
    Queue.CANCELLED_TRANSACTION,
    Queue.TOKEN_MISMATCH,
    Queue.ESCALATED,
)


@dataclass
class SweepReport:
    candidates: int = 0
    opened: list[str] = field(default_factory=list)
    auto_resolved: list[str] = field(default_factory=list)
    skipped: int = 0
    redispatched: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    read_units: float = 0.0

    def add_units(self, units: float) -> None:
        self.read_units += units

    def lines(self) -> list[str]:
        out = [
            f"stuck-claim candidates: {self.candidates}",
            f"cases opened: {len(self.opened)}",
            *(f"  opened {c}" for c in self.opened),
            f"auto-resolved as committed: {len(self.auto_resolved)}",
            *(f"  resolved {c}" for c in self.auto_resolved),
        ]
        out.extend(f"error: {e}" for e in self.errors)
        return out


def _pledge_evidence(store: Store, claim: Claim) -> dict[str, Any]:
    pledge = PledgeRepository(store).get(claim.intent_id, consistent=True)
    return {"pledge_exists": pledge is not None, "pledge": pledge.snapshot() if pledge else None}


def sweep_stuck_claims(
    sources: Sequence[Store], *, home: Callable[[str], Store], grace_s: int | None = None
) -> SweepReport:
    """Query every shard of the pending index in each of ``sources`` (every region's
    store), then handle each stuck claim in its home region, ``home(pk)``. A claim is
    stuck ``grace_s`` (default ``STUCK_GRACE_S``) after its lease ended."""
    report = SweepReport()
    bound = clock.epoch() - (settings.STUCK_GRACE_S if grace_s is None else grace_s)
    seen: set[str] = set()
    for source in sources:
        for shard in range(PENDING_SHARDS):
            keys, units = ClaimRepository(source).pending_candidates(f"P#{shard}", bound)
            report.read_units += units
            for pk in keys:
                if pk in seen:  # replicated to several regions: handle it once
                    continue
                seen.add(pk)
                report.candidates += 1
                try:
                    _sweep_one(home(pk), pk, bound, report)
                except (BotoCoreError, ClientError, CaseError) as exc:
                    report.errors.append(f"{pk}: {error_code(exc)}")
                    logger.warning(
                        "sweep of one claim failed: %s", error_code(exc), extra=log_fields(exc)
                    )
    return report


def sweep_claim(pk: str, *, grace_s: int, store: Store) -> Case | None:
    """Sweep one claim now (the drill's own), with its own grace; returns its case."""
    report = SweepReport()
    return _sweep_one(store, pk, clock.epoch() - grace_s, report)


def _sweep_one(store: Store, pk: str, bound: int, report: SweepReport) -> Case | None:
    claim = ClaimRepository(store).get(pk)
    report.read_units += 0.5
    if claim is None or claim.status != ClaimStatus.PENDING or not claim.expired(bound):
        report.skipped += 1  # moved on since the (eventually consistent) index saw it
        return None
    evidence = _pledge_evidence(store, claim)
    actor = system_actor()
    case = case_build(
        claim=claim,
        cause=CaseCause(
            CaseType.STUCK_PENDING,
            evidence=evidence,
            client_outcome=ClientOutcome(error=ErrorKind.WORKER_DIED),
        ),
        opened_by=actor,
        now=clock.now(),
        region_tag=store.tag,
    )
    resolves_itself = evidence["pledge_exists"] and settings.AUTO_RESOLVE_COMMITTED
    # Unless the case resolves at once (which finalises the claim), the claim leaves the
    # index in the case's own transaction, so no later sweep reads it again (if it was
    # re-claimed or finished meanwhile, the case stays for a human to close).
    attach = (
        None
        if resolves_itself
        else ClaimRepository(store).attach_item(
            claim, case_id=case.case_id, error_code=CaseType.STUCK_PENDING
        )
    )
    stored, created = case_open(store, case=case, actor=actor, claim_item=attach)
    if created:
        report.opened.append(stored.case_id)
    if resolves_itself:
        auto_resolve(store, stored.case_id, report)
        return CaseRepository(store).get(stored.case_id)
    if not created:
        with contextlib.suppress(ClaimTaken):
            ClaimRepository(store).attach_case(
                claim, case_id=stored.case_id, error_code=CaseType.STUCK_PENDING
            )
    return stored


def auto_resolve(store: Store, case_id: str, report: SweepReport) -> None:
    """Resolve the case as CONFIRMED_COMMITTED by ``system``, deciding on the case and
    the evidence read now (``case_dispose`` reads both, and writes on the version read).
    Another hand that changed the case first wins: this writes nothing (counted)."""
    try:
        result = case_dispose(
            case_id=case_id,
            disposition=Disposition.CONFIRMED_COMMITTED,
            staff=StaffAction(
                actor=system_actor(),
                reason_code=AUTO_REASON,
                reason_text=AUTO_TEXT,
                seen_version=None,
                action_id=f"auto-confirm-{case_id}",
            ),
            store=store,
        )
    except (CaseChanged, EvidenceRefused):
        return  # decided meanwhile, or the evidence does not (yet) settle it
    if result.applied:
        report.auto_resolved.append(case_id)


def recheck_open_cases(
    store: Store, report: SweepReport | None = None, *, limit: int = 500
) -> SweepReport:
    """Resolve open claim cases whose question the evidence now answers: a consistent
    read finds the pledge recorded with the case's own request (bounded per run)."""
    report = report or SweepReport()
    if not settings.AUTO_RESOLVE_COMMITTED:
        return report
    for queue in RECHECK_QUEUES:
        for row in CaseRepository(store).walk_queue(queue, limit=limit, on_units=report.add_units):
            if not row.get("intent_id"):
                continue  # a fund's ledger drift case (escalated): no intent to read
            if PledgeRepository(store).get(row["intent_id"], consistent=True) is None:
                continue
            try:
                auto_resolve(store, row["case_id"], report)
            except CaseError as exc:
                report.errors.append(f"{row['case_id']}: {exc}")
    return report


RETRY_STALE_S = 120


def redispatch_stale_retries(
    store: Store, report: SweepReport | None = None, *, limit: int = 500
) -> SweepReport:
    """Queue again any RETRY_COMMIT still 'queued' after ``RETRY_STALE_S`` (the broker was
    down when it was requested, or the task was lost)."""
    report = report or SweepReport()
    cutoff = clock.iso(clock.now() - timedelta(seconds=RETRY_STALE_S))
    for queue in (*(Queue(t) for t in CASE_TYPES), Queue.ESCALATED):
        for row in CaseRepository(store).walk_queue(queue, limit=limit, on_units=report.add_units):
            retry: CommitRetry | None = row.get("retry")
            if (
                retry is not None
                and retry.status == RetryStatus.QUEUED
                and (retry.requested_at or "") < cutoff
            ):
                enqueue_retry(row["case_id"], retry.request_id)
                report.redispatched.append(row["case_id"])
    return report


def sweep_claims_and_cases(
    sources: Sequence[Store],
    *,
    home: Callable[[str], Store],
    grace_s: int | None = None,
) -> SweepReport:
    """Stuck claims in every region; open cases and stale retries in every region, each
    region its own cases. No ledger drift check: for a run that checks its own ledger and
    measures its reads."""
    report = sweep_stuck_claims(sources, home=home, grace_s=grace_s)
    for store in sources:
        recheck_open_cases(store, report)
        redispatch_stale_retries(store, report)
    return report


def sweep_all(
    sources: Sequence[Store],
    *,
    home: Callable[[str], Store],
    grace_s: int | None = None,
) -> SweepReport:
    """Every sweep once: :func:`sweep_claims_and_cases`, then the ledger drift check when
    it is due (``LEDGER_DRIFT_INTERVAL_S``; casework/drift/), its cases counted as
    opened."""
    report = sweep_claims_and_cases(sources, home=home, grace_s=grace_s)
    try:
        drift = ledger_drift_check(sources, home=home)
    except (BotoCoreError, ClientError, CaseError) as exc:
        report.errors.append(f"ledger drift: {error_code(exc)}")
        logger.warning("ledger drift check failed: %s", error_code(exc), extra=log_fields(exc))
    else:
        report.opened.extend(drift.opened)
    return report
