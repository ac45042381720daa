"""Four-eyes overrides on cases (docs/design.md §6): RELEASE_CLAIM, VOID_PLEDGE and REOPEN are
requested by one person and approved or rejected by a different supervisor; unanswered
requests expire back to the case's prior state."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.conf import settings

from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.repository import audit_event_build
from reconciliation.cases.actions import (
    ActionResult,
    StaffAction,
    action_begin,
    already_applied,
)
from reconciliation.cases.changes import CaseError, NotAllowed, case_commit_change
from reconciliation.cases.models import Case, OverrideRequest, Requester, retry_in_flight
from reconciliation.cases.policy import LABELS, OVERRIDES, Permission, allowed_actions
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.transitions import (
    CaseChange,
    Grounds,
    case_override_approved,
    case_override_expired,
    case_override_rejected,
    case_override_requested,
)
from reconciliation.cases.vocabulary import CaseState, ErrorKind, Override, Queue
from reconciliation.casework.evidence import Decided, evidence_check
from reconciliation.casework.hooks import override_expired_announce
from reconciliation.claims.ledger import LedgerRepository
from reconciliation.claims.models import ClaimStatus, PledgeStatus
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.currencies import amount_text
from reconciliation.stores import Store, pledge_stream


def override_request(
    *,
    case_id: str,
    override: Override,
    staff: StaffAction,
    store: Store,
) -> ActionResult:
    """Ask for RELEASE_CLAIM, VOID_PLEDGE or REOPEN; a different supervisor must approve."""
    if override not in OVERRIDES:
        raise CaseError(f"Unknown override {override}.")
    start = action_begin(
        store, case_id=case_id, staff=staff, permission=Permission.OVERRIDE_REQUEST
    )
    case, actor, grounds, reason = start.case, staff.actor, start.grounds, start.reason
    if start.done:
        return already_applied(case)
    if override not in allowed_actions(case.case_type, case.state, actor.role):
        raise CaseError(
            f"{LABELS[override]} is not available while the case is "
            f"{CaseState.words(case.state).lower()}."
        )
    if retry_in_flight(case):
        # The retry's outcome decides whether there is anything to release or void: a
        # request raised now would be decided against evidence about to change.
        asked = (case.retry.requested_by if case.retry else None) or "someone"
        raise CaseError(
            f"A commit retry asked for by {asked} has not finished yet; ask for "
            f"{LABELS[override].lower()} once its outcome shows on this page."
        )
    # Each override reads only what its evidence rule consults (policy.EVIDENCE_NEEDED).
    evidence = evidence_check(store, case, override)
    release = override == Override.RELEASE_CLAIM and evidence.claim is not None
    void = override == Override.VOID_PLEDGE and evidence.pledge is not None
    now = grounds.at
    request = OverrideRequest(
        request_id=str(uuid.uuid4()),
        action=Override(override),
        requested_by=Requester.from_json(actor.as_audit()),
        reason_code=reason.code,
        reason_text=reason.text,
        requested_at=clock.iso(now),
        expires_at=clock.epoch(now) + settings.OVERRIDE_TTL_S,
        # The version after this request; only an assignment carries it forward
        # (case_assign): any other change of the case leaves it behind.
        pinned_version=case.version + 1,
        prior_state=case.state,
        claim_version=evidence.claim.version if release and evidence.claim else None,
        pledge_audit_seq=evidence.pledge.audit_seq if void and evidence.pledge else None,
    )
    updated = case_commit_change(store, case, *case_override_requested(case, grounds, request))
    return Decided(
        updated,
        True,
        f"{LABELS[override]} requested; a supervisor must approve.",
        evidence=evidence,
    )


def _pending_override(case: Case, request_id: str | None) -> OverrideRequest:
    override = case.override
    if case.state != CaseState.OVERRIDE_REQUESTED or override is None:
        last = case.resolution
        raise CaseError(
            f"There is no pending request on this case: it is {CaseState.words(case.state).lower()}"
            + (f", decided by {last.by} at {clock.plain(last.at)}." if last else ".")
        )
    if request_id and override.request_id != request_id:
        raise CaseError("That request was already decided; a newer request is pending.")
    return override


@dataclass(frozen=True)
class _Decision:
    """A supervisor's decision on a pending request, its checks passed: the case as read,
    the request, and the reason as checked."""

    case: Case
    override: OverrideRequest
    grounds: Grounds


def _decide(
    store: Store,
    *,
    permission: Permission,
    case_id: str,
    request_id: str | None,
    staff: StaffAction,
    then: Callable[[Store, StaffAction, _Decision], ActionResult],
) -> ActionResult:
    """A supervisor's decision on a pending request: the common checks, then ``then``
    with the request (unless this action id was already applied). Nobody decides their
    own request, either way (four eyes). A decision is on the request, not on a case
    version the supervisor saw: ``staff.seen_version`` is not consulted (the request's
    pinned version is)."""
    start = action_begin(
        store, case_id=case_id, staff=replace(staff, seen_version=None), permission=permission
    )
    if start.done:
        return already_applied(start.case)
    override = _pending_override(start.case, request_id)
    if override.requested_by.username == staff.actor.username:
        raise NotAllowed("You requested this override; a different supervisor must decide it.")
    decision = _Decision(start.case, override, start.grounds)
    return then(store, staff, decision)


def override_approve(
    *, case_id: str, request_id: str | None, staff: StaffAction, store: Store
) -> ActionResult:
    """Approve the pending request (``request_id``; ``None``: whichever is pending): it
    applies only at the case version it pinned and before it expires."""
    return _decide(
        store,
        permission=Permission.OVERRIDE_APPROVE,
        case_id=case_id,
        request_id=request_id,
        staff=staff,
        then=_approved,
    )


def override_reject(
    *, case_id: str, request_id: str | None, staff: StaffAction, store: Store
) -> ActionResult:
    """Reject the pending request: the case goes back where it was."""
    return _decide(
        store,
        permission=Permission.OVERRIDE_REJECT,
        case_id=case_id,
        request_id=request_id,
        staff=staff,
        then=_rejected,
    )


def _approved(store: Store, staff: StaffAction, decision: _Decision) -> ActionResult:
    case, override = decision.case, decision.override
    if case.version != override.pinned_version:
        raise CaseError(
            f"The case changed since the request (by {case.last_actor} at "
            f"{clock.plain(case.last_action_at)}); the request no longer applies."
        )
    if override.expired(clock.epoch()):
        raise CaseError("The request has expired; ask for it again if it is still needed.")
    # The evidence the override needs, read again now: approval is a decision of its own.
    evidence_check(store, case, override.action)
    change = case_override_approved(case, decision.grounds, override)
    if override.action == Override.REOPEN:
        updated = case_commit_change(store, case, *change)
        return ActionResult(updated, True, "Approved: the case is open again.")
    if override.action == Override.RELEASE_CLAIM:
        return _release(store, decision, change)
    if override.action == Override.VOID_PLEDGE:
        return _void(store, decision, change)
    raise CaseError(f"Unknown override {override.action}.")


def _release(store: Store, decision: _Decision, change: CaseChange) -> ActionResult:
    """Resolve the case and, in the same transaction, fail its claim (if it still exists,
    at the version the request saw) so the client may retry."""
    case, override = decision.case, decision.override
    claim = ClaimRepository(store).get(case.claim_pk)
    if claim is not None:
        if claim.version != override.claim_version:
            raise CaseError(
                f"The claim changed since the request (now {claim.status} at version "
                f"{claim.version}); releasing it could undo a newer attempt."
            )
        release = ClaimRepository(store).finalise_item(
            claim,
            status=ClaimStatus.FAILED,
            error_code=ErrorKind.RELEASED_BY_OVERRIDE,
            expires_in_s=0,
            require_pending=False,
        )
        change = change.along(release)
    updated = case_commit_change(store, case, *change)
    return ActionResult(updated, True, "Approved: the claim is released; the client may retry.")


def _void(store: Store, decision: _Decision, change: CaseChange) -> ActionResult:
    case, override, grounds = decision.case, decision.override, decision.grounds
    pledge = PledgeRepository(store).get(case.intent_id)
    if pledge is None or pledge.status != PledgeStatus.RECORDED:
        raise CaseError("The pledge is no longer RECORDED; nothing to void.")
    if pledge.audit_seq != override.pledge_audit_seq:
        raise CaseError("The pledge changed since the request; ask again.")
    now = clock.now()
    event = audit_event_build(
        AuditEvent(
            action=AuditAction.PLEDGE_VOIDED,
            actor=grounds.actor,
            at=now,
            case_id=case.case_id,
            intent_id=pledge.intent_id,
            before={"status": pledge.status},
            after={"status": PledgeStatus.VOIDED},
            disposition=Override.VOID_PLEDGE,
            reason_code=grounds.reason_code,
            reason_text=grounds.reason_text,
            # The pledge voided, so its audit row says what (docs/audit.md): since
            # "before/after in audit rows"; earlier voids show the status only.
            detail={
                "requested_by": override.requested_by.username,
                "amount": amount_text(pledge.amount, pledge.currency),
                "currency": pledge.currency,
                "fund": pledge.fund,
            },
        ),
        stream=pledge_stream(pledge.intent_id, store.tag),
        seq=pledge.audit_seq + 1,
        prev_hash=pledge.audit_head,
    )
    void = PledgeRepository(store).void_item(
        pledge, voided_at=clock.iso(now), audit_head=event["hash"]
    )
    # The void subtracts in the same transaction that marks the pledge VOIDED, so the
    # ledger always equals the sum of RECORDED pledges.
    subtract = LedgerRepository(store).add_item(
        pledge.ledger_key,
        fund=pledge.fund,
        currency=pledge.currency,
        amount=-pledge.amount,
        count=-1,
    )
    updated = case_commit_change(store, case, *change.along(void, subtract, events=(event,)))
    return ActionResult(updated, True, "Approved: the pledge is voided and the ledger adjusted.")


def _rejected(store: Store, staff: StaffAction, decision: _Decision) -> ActionResult:
    case = decision.case
    change = case_override_rejected(case, decision.grounds, decision.override)
    updated = case_commit_change(store, case, *change)
    return ActionResult(updated, True, "Rejected: the case is back where it was.")


def overrides_expire(*, store: Store) -> list[str]:
    """Return expired override requests to their prior state, by ``system``. Queries
    the approval queue only (its cost grows with pending requests)."""
    actor = system_actor()
    expired: list[str] = []
    now = clock.epoch()
    for row in CaseRepository(store).walk_queue(Queue.OVERRIDE_REQUESTED):
        pending: OverrideRequest | None = row.get("override")
        if pending is None or not pending.expired(now):
            continue
        case = CaseRepository(store).get(row["case_id"])
        # Decide on the case as read now, not on the index row: the request the row saw
        # may have been decided, and a newer one asked, since.
        if case is None or case.state != CaseState.OVERRIDE_REQUESTED or not case.override:
            continue
        override = case.override
        if not override.expired(now):
            continue
        try:
            grounds = Grounds(actor, clock.now(), f"expire-{override.request_id}")
            case_commit_change(store, case, *case_override_expired(case, grounds, override))
            expired.append(case.case_id)
        except CaseError:
            continue  # someone decided it meanwhile
        override_expired_announce(case_id=case.case_id, request=override)
    return expired
