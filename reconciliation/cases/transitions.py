"""Case transitions (docs/design.md §6): each takes the case as read and returns the next
record and the audit event it emits, as a :class:`CaseChange`. Nothing here reads a store
or a clock: who acts, when and why arrive as :class:`Grounds`.
``reconciliation.cases.changes.case_commit_change`` writes a change in one transaction,
and the repository derives the attributes that key the indexes (``case_indexed``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

from reconciliation import clock
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.cases.models import Case, CommitRetry, OverrideRequest, Resolution
from reconciliation.cases.vocabulary import CaseState, Disposition, Override, ReasonCode


@dataclass(frozen=True)
class Grounds:
    """Who changes a case, at which instant, under which action id (a second submission
    of the same id changes nothing) and, for a reasoned action, why."""

    actor: Actor
    at: datetime
    action_id: str | None = None
    reason_code: ReasonCode | None = None
    reason_text: str | None = None

    @property
    def at_text(self) -> str:
        return clock.iso(self.at)


@dataclass(frozen=True)
class CaseEvent:
    """The audit event a case change emits, before it has its place in the case's
    stream, with what commits or fails with the change: ``writes`` (claim, pledge,
    ledger items) and ``events`` (other streams' audit events, already placed)."""

    action: AuditAction
    grounds: Grounds
    disposition: Disposition | Override | None = None
    detail: dict[str, Any] | None = None
    writes: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()

    def audit(self, read: Case, updated: Case) -> AuditEvent:
        """The event as the audit trail records it: the case before and after."""
        grounds = self.grounds
        return AuditEvent(
            action=self.action,
            actor=grounds.actor,
            at=grounds.at,
            case_id=read.case_id,
            intent_id=read.intent_id,
            before=read.summary(),
            after=updated.summary(),
            disposition=self.disposition,
            reason_code=grounds.reason_code,
            reason_text=grounds.reason_text,
            detail=self.detail,
        )


class CaseChange(NamedTuple):
    """The next record of a case and the event that changes it into that record."""

    case: Case
    event: CaseEvent

    def along(self, *writes: dict[str, Any], events: tuple[dict[str, Any], ...] = ()) -> CaseChange:
        """This change with other items (and other streams' events) in its transaction."""
        event = replace(self.event, writes=self.event.writes + writes)
        return CaseChange(self.case, replace(event, events=event.events + events))


def _next(case: Case, grounds: Grounds) -> Case:
    """``case`` one version on, acted on last by ``grounds``' actor."""
    return replace(
        case,
        version=case.version + 1,
        last_actor=grounds.actor.username,
        last_action_at=grounds.at_text,
        last_action_id=grounds.action_id,
    )


def _resolution(how: Disposition | Override, grounds: Grounds, **parts: str | None) -> Resolution:
    return Resolution(disposition=how, by=grounds.actor.username, at=grounds.at_text, **parts)


# --- dispositions ------------------------------------------------------------------------


def case_disposed(
    case: Case,
    grounds: Grounds,
    disposition: Disposition,
    *,
    detail: dict[str, Any] | None = None,
) -> CaseChange:
    """The case resolved by ``disposition``: resolved by the actor, now."""
    resolved = replace(
        _next(case, grounds),
        state=CaseState.RESOLVED,
        resolution=_resolution(disposition, grounds),
    )
    event = CaseEvent(AuditAction.DISPOSITION_RECORDED, grounds, disposition, detail)
    return CaseChange(resolved, event)


def case_redelivery_asked(
    case: Case, grounds: Grounds, *, detail: dict[str, Any] | None = None
) -> CaseChange:
    """A REDELIVER recorded: the case stays as it is (open until the delivery shows
    delivered), one version on."""
    event = CaseEvent(AuditAction.DISPOSITION_RECORDED, grounds, Disposition.REDELIVER, detail)
    return CaseChange(_next(case, grounds), event)


def case_escalated(case: Case, grounds: Grounds) -> CaseChange:
    escalated = replace(_next(case, grounds), state=CaseState.ESCALATED)
    return CaseChange(
        escalated, CaseEvent(AuditAction.CASE_ESCALATED, grounds, Disposition.ESCALATE)
    )


def case_retry_asked(case: Case, grounds: Grounds, retry: CommitRetry) -> CaseChange:
    """A background commit retry queued on the case; the case keeps its state."""
    event = CaseEvent(AuditAction.RETRY_COMMIT_REQUESTED, grounds, Disposition.RETRY_COMMIT)
    return CaseChange(replace(_next(case, grounds), retry=retry), event)


def case_retry_resolved(
    case: Case, grounds: Grounds, retry: CommitRetry, *, superseded_by: str | None = None
) -> CaseChange:
    """The retry's outcome resolved the case: it recorded the pledge (or found it
    recorded), or its unclear outcome opened the case ``superseded_by``, which now
    carries the intent (the retry failed, and this case points at that one)."""
    resolution = _resolution(
        Disposition.RETRY_COMMIT,
        grounds,
        outcome=retry.status,
        asked_by=retry.requested_by,
        superseded_by=superseded_by,
    )
    resolved = replace(
        _next(case, grounds), state=CaseState.RESOLVED, retry=retry, resolution=resolution
    )
    if superseded_by:
        detail: dict[str, Any] | None = {"outcome": retry.status, "superseded_by": superseded_by}
        action = AuditAction.RETRY_COMMIT_FAILED
    else:
        detail, action = None, AuditAction.RETRY_COMMIT_SUCCEEDED
    return CaseChange(resolved, CaseEvent(action, grounds, Disposition.RETRY_COMMIT, detail))


def case_retry_failed(case: Case, grounds: Grounds, retry: CommitRetry) -> CaseChange:
    """The retry ended without recording the pledge; the case stays for a person."""
    event = CaseEvent(
        AuditAction.RETRY_COMMIT_FAILED,
        grounds,
        Disposition.RETRY_COMMIT,
        {"outcome": retry.status},
    )
    return CaseChange(replace(_next(case, grounds), retry=retry), event)


# --- assignment --------------------------------------------------------------------------


def case_assigned(case: Case, grounds: Grounds, assignee: str | None) -> CaseChange:
    """Who works the case becomes ``assignee`` (``None``: nobody).

    Who works the case is not what a pending override depends on: a pin at the version
    read moves with the assignment, in the same conditional write, so approval still
    applies. It moves only while current: after a material change (state, evidence,
    resolution) it stays behind and approval is refused as before."""
    assigned = replace(_next(case, grounds), assignee=assignee)
    override = case.override
    if (
        case.state == CaseState.OVERRIDE_REQUESTED
        and override
        and override.pinned_version == case.version
    ):
        assigned = replace(assigned, override=replace(override, pinned_version=assigned.version))
    action = AuditAction.CASE_UNASSIGNED if assignee is None else AuditAction.CASE_ASSIGNED
    detail = {"assignee": assignee, "previous_assignee": case.assignee}
    return CaseChange(assigned, CaseEvent(action, grounds, detail=detail))


# --- four-eyes overrides -----------------------------------------------------------------


def case_override_requested(case: Case, grounds: Grounds, request: OverrideRequest) -> CaseChange:
    """A request raised: the case awaits a different supervisor's decision."""
    asked = replace(_next(case, grounds), state=CaseState.OVERRIDE_REQUESTED, override=request)
    return CaseChange(asked, CaseEvent(AuditAction.OVERRIDE_REQUESTED, grounds, request.action))


def case_override_approved(case: Case, grounds: Grounds, request: OverrideRequest) -> CaseChange:
    """The pending ``request`` approved: REOPEN opens the case again without its
    resolution; RELEASE_CLAIM and VOID_PLEDGE resolve it, naming who asked."""
    approved = replace(_next(case, grounds), override=None)
    if request.action == Override.REOPEN:
        approved = replace(approved, state=CaseState.OPEN, resolution=None)
    else:
        resolution = _resolution(
            request.action, grounds, requested_by=request.requested_by.username
        )
        approved = replace(approved, state=CaseState.RESOLVED, resolution=resolution)
    return CaseChange(approved, _decision(AuditAction.OVERRIDE_APPROVED, grounds, request))


def case_override_rejected(case: Case, grounds: Grounds, request: OverrideRequest) -> CaseChange:
    """The pending ``request`` rejected: the case goes back where it was."""
    return _returned(case, grounds, request, AuditAction.OVERRIDE_REJECTED)


def case_override_expired(case: Case, grounds: Grounds, request: OverrideRequest) -> CaseChange:
    """The pending ``request`` ran out unanswered: the case goes back where it was."""
    return _returned(case, grounds, request, AuditAction.OVERRIDE_EXPIRED)


def _returned(
    case: Case, grounds: Grounds, request: OverrideRequest, action: AuditAction
) -> CaseChange:
    # A case returned to RESOLVED (a reopen declined) keeps the resolution it had.
    returned = replace(_next(case, grounds), state=request.return_state, override=None)
    return CaseChange(returned, _decision(action, grounds, request))


def _decision(action: AuditAction, grounds: Grounds, request: OverrideRequest) -> CaseEvent:
    return CaseEvent(action, grounds, request.action, {"request": request.to_json()})
