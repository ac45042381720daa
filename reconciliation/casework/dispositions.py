"""Evidence-based dispositions, assignment and bulk work on cases (docs/design.md §6).

Each service takes the staff action (:class:`~reconciliation.cases.actions.StaffAction`:
the acting :class:`Actor` with its role, the reason, the case version the actor saw and
an action id from the form), checks the role itself, and commits one
transaction: the case change, its audit event and any claim/pledge/ledger write the
disposition implies. A repeated action id is a no-op; a stale version is refused with
who changed the case and when.

Four-eyes overrides live in :mod:`reconciliation.casework.overrides`, the background
commit retry in :mod:`reconciliation.casework.retries`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Role
from reconciliation.cases.actions import (
    ActionResult,
    StaffAction,
    action_begin,
    already_applied,
    check_reason,
    check_role,
)
from reconciliation.cases.changes import CaseError, NotAllowed, case_commit_change, case_load
from reconciliation.cases.models import Case, CommitRetry, retry_in_flight
from reconciliation.cases.policy import (
    BULK_DISPOSITIONS,
    LABELS,
    Permission,
    allowed_actions,
    evidence_refusal,
)
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.transitions import (
    CaseChange,
    Grounds,
    case_assigned,
    case_disposed,
    case_escalated,
    case_redelivery_asked,
    case_retry_asked,
)
from reconciliation.cases.vocabulary import CaseState, CaseType, Disposition, RetryStatus
from reconciliation.casework.evidence import (
    Decided,
    DecisionEvidence,
    evidence_check,
    evidence_read,
)
from reconciliation.casework.retries import enqueue_retry
from reconciliation.claims.models import ClaimStatus
from reconciliation.claims.pledges import ACK_GAVE_UP, PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.currencies import amount_text
from reconciliation.stores import Store

__all__ = ["BulkRow", "case_assign", "case_dispose", "case_unassign", "cases_bulk"]


# --- evidence-based dispositions --------------------------------------------------------


def case_dispose(
    *,
    case_id: str,
    disposition: Disposition,
    staff: StaffAction,
    store: Store,
) -> ActionResult:
    """Record an evidence-based disposition: CONFIRMED_COMMITTED, RETRY_COMMIT,
    DUPLICATE_REJECTED_OK or ESCALATE; on a LEDGER_DRIFT case, DRIFT_EXPLAINED or
    DRIFT_CORRECTED; on an ACK_UNDELIVERED case, REDELIVER or ACK_CLOSED
    (``policy.BY_CASE_TYPE``)."""
    start = action_begin(store, case_id=case_id, staff=staff, permission=Permission.DISPOSE)
    case, actor = start.case, staff.actor
    if start.done:
        return already_applied(case)
    if actor.role != Role.SYSTEM and disposition not in allowed_actions(
        case.case_type, case.state, actor.role
    ):
        raise CaseError(
            f"{LABELS.get(disposition, disposition)} is not available for a "
            f"{CaseType.words(case.case_type).lower()} case in state "
            f"{CaseState.words(case.state).lower()}."
        )
    if actor.role == Role.SYSTEM and case.state not in (CaseState.OPEN, CaseState.ESCALATED):
        raise CaseError(f"The case is {CaseState.words(case.state).lower()}.")
    handler = _DISPOSITION_HANDLERS.get(disposition)
    if handler is None:
        raise CaseError(f"Unknown disposition {disposition}.")
    # The evidence this disposition needs, read now (consistent), whoever decides; and
    # the claim of a disposition that writes it, in the same reads (never twice).
    evidence = evidence_check(store, case, disposition, claim_too=disposition in _WRITES_CLAIM)
    return handler(_Disposing(store, case, evidence, start.grounds, Disposition(disposition)))


@dataclass(frozen=True)
class _Disposing:
    """A disposition whose role, reason, case state and evidence are checked: what its
    handler changes the case with."""

    store: Store
    case: Case
    evidence: DecisionEvidence
    grounds: Grounds
    disposition: Disposition

    def commit(self, change: CaseChange) -> Case:
        return case_commit_change(self.store, self.case, *change)

    def resolve(self, *, detail: dict[str, Any] | None = None) -> CaseChange:
        """The case resolved by this disposition."""
        return case_disposed(self.case, self.grounds, self.disposition, detail=detail)


def _duplicate_rejected_ok(d: _Disposing) -> ActionResult:
    updated = d.commit(d.resolve(detail=_evidence_detail(d.evidence)))
    return Decided(
        updated, True, "Recorded: the duplicate was correctly rejected.", evidence=d.evidence
    )


_DRIFT_MESSAGES = {
    Disposition.DRIFT_EXPLAINED: (
        "Recorded: the ledger difference is explained; nothing was changed."
    ),
    Disposition.DRIFT_CORRECTED: (
        "Recorded: finance corrected the difference; nothing was written here."
    ),
}


def _evidence_detail(evidence: DecisionEvidence) -> dict[str, Any]:
    """The deciding evidence, as the audit event records it."""
    return {
        "evidence": evidence.line,
        "pledge": evidence.pledge.snapshot() if evidence.pledge else None,
    }


def _drift_resolved(d: _Disposing) -> ActionResult:
    """A LEDGER_DRIFT case closed with what staff found (its reason says how). Only the
    case changes: money is corrected by finance's own adjustment, never from here."""
    updated = d.commit(d.resolve())
    return ActionResult(updated, True, _DRIFT_MESSAGES[d.disposition])


def _ack_delivery(case: Case) -> str:
    """The pledge item's key of the delivery an ACK_UNDELIVERED case is about
    (``<endpoint>/<event>``, reconciliation/acks/models.py · delivery_key)."""
    ack = case.evidence.ack or {}
    return f"{ack.get('endpoint_id', '')}/{ack.get('event_type', '')}"


def _redeliver(d: _Disposing) -> ActionResult:
    """Send the acknowledgement again: one transaction of the case's audited change and
    the pledge item's delivery made due now with fresh attempts, conditioned on the
    delivery read here (still given up, no record since: the pledge's fence). The case
    stays open: whoever works it closes it once the delivery shows delivered, and if the
    dispatcher gives up again the case is already there."""
    case = d.case
    delivery = _ack_delivery(case)
    pledges = PledgeRepository(d.store)
    seen = pledges.ack_delivery_read(case.intent_id, delivery)
    now = clock.epoch()
    if seen is None:
        raise CaseError("The pledge has no such acknowledgement delivery; nothing was sent.")
    if seen.status != ACK_GAVE_UP:
        raise CaseError(
            "The acknowledgement is not given up now (already redelivered, or sending): "
            "nothing was queued again."
        )
    change = case_redelivery_asked(
        case, d.grounds, detail={"delivery": delivery, "attempts_before": seen.attempts}
    )
    redeliver = pledges.ack_redeliver_item(case.intent_id, delivery=delivery, seen=seen, now=now)
    updated = d.commit(change.along(redeliver))
    return ActionResult(
        updated,
        True,
        "The acknowledgement is due again now, with fresh attempts and the same "
        "webhook-id. The case stays open: close it once the delivery shows delivered.",
    )


def _ack_closed(d: _Disposing) -> ActionResult:
    """An ACK_UNDELIVERED case closed without sending anything (its reason says why)."""
    updated = d.commit(d.resolve(detail={"delivery": _ack_delivery(d.case)}))
    return ActionResult(updated, True, "Closed: the acknowledgement will not be sent again.")


def _escalate(d: _Disposing) -> ActionResult:
    updated = d.commit(case_escalated(d.case, d.grounds))
    return Decided(updated, True, "Escalated.", evidence=d.evidence)


def _retry_commit(d: _Disposing) -> ActionResult:
    case = d.case
    if retry_in_flight(case):
        asked = (case.retry.requested_by if case.retry else None) or "someone"
        raise CaseError(
            f"A commit retry asked for by {asked} has not finished yet; its outcome will "
            "show on this page. Nothing was queued again."
        )
    retry = CommitRetry(
        status=RetryStatus.QUEUED,
        requested_by=d.grounds.actor.username,
        requested_at=d.grounds.at_text,
        request_id=d.grounds.action_id or str(uuid.uuid4()),
    )
    updated = d.commit(case_retry_asked(case, d.grounds, retry))
    enqueue_retry(updated.case_id, retry.request_id)
    return Decided(
        updated,
        True,
        "The commit will be retried in the background with the same token.",
        evidence=d.evidence,
    )


def _confirm_committed(d: _Disposing) -> ActionResult:
    evidence = d.evidence
    pledge, claim = evidence.pledge, evidence.claim  # both read consistently just now
    if pledge is None:  # pragma: no cover - evidence_check refuses it
        raise CaseError("No pledge.")
    extra = []
    if claim is not None and claim.status != ClaimStatus.COMPLETED:
        # Finalise the claim so replays are answered from it, fenced on the version read;
        # the page after it shows the claim as this transaction leaves it (same values).
        at, body, ttl = clock.now(), pledge.api_body(), settings.CLAIM_COMPLETED_TTL_S
        extra.append(
            ClaimRepository(d.store).finalise_item(
                claim,
                status=ClaimStatus.COMPLETED,
                response_body=body,
                expires_in_s=ttl,
                require_pending=False,
                at=at,
            )
        )
        finalised = ClaimRepository.finalised(
            claim, status=ClaimStatus.COMPLETED, response_body=body, expires_in_s=ttl, at=at
        )
        evidence = evidence.with_claim(finalised)
    change = d.resolve(detail={**_evidence_detail(evidence), "claim_finalised": bool(extra)})
    updated = d.commit(change.along(*extra))
    return Decided(updated, True, "Confirmed committed: the pledge is recorded.", evidence=evidence)


# The dispositions that write the claim (fenced on its version): their decision reads it.
_WRITES_CLAIM = frozenset({Disposition.CONFIRMED_COMMITTED})

# What each evidence-based disposition does, once the case, role and reason are checked.
_DISPOSITION_HANDLERS: dict[Disposition, Callable[[_Disposing], ActionResult]] = {
    Disposition.CONFIRMED_COMMITTED: _confirm_committed,
    Disposition.DUPLICATE_REJECTED_OK: _duplicate_rejected_ok,
    Disposition.DRIFT_EXPLAINED: _drift_resolved,
    Disposition.DRIFT_CORRECTED: _drift_resolved,
    Disposition.ESCALATE: _escalate,
    Disposition.RETRY_COMMIT: _retry_commit,
    Disposition.REDELIVER: _redeliver,
    Disposition.ACK_CLOSED: _ack_closed,
}


# --- assignment -------------------------------------------------------------------------


def case_assign(
    *,
    case_id: str,
    staff: StaffAction,
    assignee: str | None = None,
    store: Store,
) -> ActionResult:
    """Assign the case to ``assignee`` (default: the actor, "take it").

    Finance staff take unassigned cases themselves (taking a colleague's case is a
    release of theirs, so a supervisor's); a supervisor assigns to any active staff
    member (the edge checks the name is one). The change and its audit event
    (before/after assignee) are one transaction."""
    return _assignment(store, case_id, staff, target=assignee or staff.actor.username)


def case_unassign(
    *,
    case_id: str,
    staff: StaffAction,
    store: Store,
) -> ActionResult:
    """Release the case: finance staff release their own, a supervisor anyone's."""
    return _assignment(store, case_id, staff, target=None)


def _assignment(
    store: Store, case_id: str, staff: StaffAction, *, target: str | None
) -> ActionResult:
    """Who works the case becomes ``target`` (``None``: nobody). No reason is asked:
    ``staff``'s reason, if any, is not recorded."""
    actor = staff.actor
    check_role(actor, Permission.ASSIGN)
    loaded = case_load(store, case_id, seen_version=staff.seen_version, action_id=staff.action_id)
    case = loaded.case
    if loaded.done:
        return already_applied(case)
    if case.state == CaseState.RESOLVED:
        raise CaseError("A resolved case cannot be assigned.")
    unassign = target is None
    supervisor = actor.role == Role.SUPERVISOR
    if target not in (None, actor.username) and not supervisor:
        raise NotAllowed("Only a supervisor may assign a case to someone else.")
    if case.assignee not in (None, actor.username) and not supervisor:
        raise NotAllowed(
            f"The case is assigned to {case.assignee}: only a supervisor may release or "
            "reassign it."
        )
    if target == case.assignee:
        who = "you" if target == actor.username else (target or "nobody")
        return ActionResult(case, False, f"Already assigned to {who}; nothing changed.")
    updated = case_commit_change(store, case, *case_assigned(case, staff.grounds(), target))
    if unassign:
        message = "Unassigned."
    elif target == actor.username:
        message = "Assigned to you."
    else:
        message = f"Assigned to {target}."
    return ActionResult(updated, True, message)


# --- bulk work --------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkRow:
    """One case of a bulk action: whether the disposition is possible (preview) or was
    applied, why not, and what the person weighs it by (its amount and evidence)."""

    case_id: str
    ok: bool
    message: str
    becomes: str = ""
    amount: str = ""
    evidence: str = ""


def cases_bulk(
    *,
    case_ids: list[str],
    disposition: Disposition,
    staff: StaffAction,
    dry_run: bool,
    store_for: Callable[[str], Store],
) -> list[BulkRow]:
    """Apply one disposition to many cases, each its own audited change in the region
    it lives in (``store_for(case_id)``, resolved by the edge: ``stores.case_store``); or,
    with ``dry_run``, say what each case would become without writing anything. Each
    case's evidence is read (consistently) and judged as a single action's would be: the
    preview says "not possible" with the reason where the evidence rules it out, and
    applying refuses the same cases. Each case is acted on at the version read here;
    ``staff.action_id`` (if any) is suffixed with the case id for each."""
    check_role(staff.actor, Permission.DISPOSE)
    if disposition not in BULK_DISPOSITIONS:
        raise CaseError(f"{LABELS.get(disposition, disposition)} cannot be applied in bulk.")
    reason = check_reason(staff.reason_code, staff.reason_text)
    reasoned = replace(staff, reason_code=reason.code, reason_text=reason.text)
    return [
        _bulk_row(store_for(case_id), case_id, disposition, reasoned, dry_run=dry_run)
        for case_id in dict.fromkeys(case_ids)
    ]


def _bulk_row(
    store: Store, case_id: str, disposition: Disposition, staff: StaffAction, *, dry_run: bool
) -> BulkRow:
    """One case of :func:`cases_bulk`: refused as a single action would be, previewed, or
    applied at the version read here."""
    case = CaseRepository(store).get(case_id)
    if case is None:
        return BulkRow(case_id, False, "No such case.")
    amount = amount_text(case.amount, case.currency) + f" {case.currency}"
    if disposition not in allowed_actions(case.case_type, case.state, staff.actor.role):
        return BulkRow(
            case_id,
            False,
            f"Not available for a {CaseType.words(case.case_type).lower()} case, "
            f"{CaseState.words(case.state).lower()}.",
            amount=amount,
        )
    evidence = evidence_read(store, case, disposition)
    refusal = evidence_refusal(disposition, evidence.facts)
    if refusal is not None:
        return BulkRow(case_id, False, refusal, amount=amount, evidence=evidence.line)
    if dry_run:
        becomes: str = {
            Disposition.ESCALATE: CaseState.ESCALATED.label,
            Disposition.DUPLICATE_REJECTED_OK: CaseState.RESOLVED.label,
            Disposition.RETRY_COMMIT: f"{CaseState.words(case.state)}, commit retried",
        }[Disposition(disposition)]
        return BulkRow(
            case_id,
            True,
            f"{CaseState.words(case.state)} → {becomes}",
            becomes,
            amount=amount,
            evidence=evidence.line,
        )
    try:
        result = case_dispose(
            case_id=case_id,
            disposition=disposition,
            staff=replace(
                staff,
                seen_version=case.version,
                action_id=f"{staff.action_id}:{case_id}" if staff.action_id else None,
            ),
            store=store,
        )
    except CaseError as exc:
        return BulkRow(case_id, False, str(exc), amount=amount, evidence=evidence.line)
    return BulkRow(
        case_id, True, result.message, result.case.state, amount=amount, evidence=evidence.line
    )
