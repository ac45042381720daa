"""Case transitions (reconciliation/cases/transitions.py) as values: the next record, the
event it emits, and the index attributes the repository derives from the record."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciliation.actors import Role
from reconciliation.audit.models import AuditAction
from reconciliation.audit.repository import audit_event_build
from reconciliation.cases.changes import AlreadyResolved, _resolution_stands
from reconciliation.cases.models import CommitRetry, OverrideRequest, Requester
from reconciliation.cases.repository import case_indexed
from reconciliation.cases.transitions import (
    case_assigned,
    case_disposed,
    case_escalated,
    case_override_approved,
    case_override_expired,
    case_override_rejected,
    case_override_requested,
    case_redelivery_asked,
    case_retry_asked,
    case_retry_failed,
    case_retry_resolved,
)
from reconciliation.cases.vocabulary import (
    CaseState,
    CaseType,
    Disposition,
    Override,
    Queue,
    ReasonCode,
    RetryStatus,
)
from tests.unit.records import OPENED_AT, a_case, actor, grounds

SAM = actor("sam", Role.SUPERVISOR)


def _request(action: Override, *, pinned: int, prior: CaseState = CaseState.OPEN):
    return OverrideRequest(
        request_id="req-1",
        action=action,
        requested_by=Requester("ada", "ada@example.org", "finance_staff"),
        reason_code=ReasonCode.DONOR_REQUEST,
        reason_text="The donor asked for it.",
        requested_at="2026-12-01T09:00:00.000000Z",
        pinned_version=pinned,
        prior_state=prior,
    )


def test_a_disposition_resolves_the_case_one_version_on():
    """Confirming a commit gives the next version, resolved by the actor at the grounds'
    instant, and names who acted last and under which action id."""
    case = a_case()
    updated, event = case_disposed(case, grounds(), Disposition.CONFIRMED_COMMITTED)
    assert (updated.version, updated.state) == (2, CaseState.RESOLVED)
    assert updated.resolution is not None
    assert updated.resolution.to_json() == {
        "disposition": "CONFIRMED_COMMITTED",
        "by": "ada",
        "at": "2026-12-01T10:00:00.000000Z",
    }
    assert (updated.last_actor, updated.last_action_at, updated.last_action_id) == (
        "ada",
        "2026-12-01T10:00:00.000000Z",
        "form-1",
    )
    assert (event.action, event.disposition) == (
        AuditAction.DISPOSITION_RECORDED,
        Disposition.CONFIRMED_COMMITTED,
    )
    assert case.version == 1 and case.state == CaseState.OPEN  # the read is untouched


def test_the_event_records_the_case_before_and_after():
    """The audit event a transition emits carries both summaries, the reason and the
    detail, and is placed in the case's stream with every empty attribute left out."""
    case = a_case()
    updated, event = case_escalated(case, grounds())
    audit = event.audit(case, case_indexed(updated))
    assert audit.before == {
        "state": CaseState.OPEN,
        "version": 1,
        "queue": Queue.STUCK_PENDING,
        "assignee": None,
        "override": None,
        "resolution": None,
    }
    assert audit.after is not None
    assert (audit.after["state"], audit.after["version"], audit.after["queue"]) == (
        CaseState.ESCALATED,
        2,
        Queue.ESCALATED,
    )
    placed = audit_event_build(
        replace(audit, event_id="e-1"), stream=f"CASE#{case.case_id}", seq=2, prev_hash="h1"
    )
    assert placed["action"] == "case_escalated" and placed["disposition"] == "ESCALATE"
    assert placed["reason_code"] == "EVIDENCE_CONFIRMS"
    assert "detail" not in placed
    again = audit_event_build(
        replace(audit, event_id="e-1"), stream=f"CASE#{case.case_id}", seq=2, prev_hash="h1"
    )
    assert again["hash"] == placed["hash"]  # the event's content alone decides its hash


def test_the_repository_derives_the_index_attributes():
    """While open a case keeps its place in its queue; resolved, it leaves the queue and is
    listed under the month, the person and the way it was resolved."""
    case = a_case()
    assert (case.queue, case.queue_sort) == (Queue.STUCK_PENDING, f"{OPENED_AT}#{case.case_id}")
    escalated = case_indexed(case_escalated(case, grounds()).case)
    assert (escalated.queue, escalated.queue_sort) == (Queue.ESCALATED, case.queue_sort)
    resolved = case_indexed(case_disposed(escalated, grounds(), Disposition.RETRY_COMMIT).case)
    assert (resolved.queue, resolved.queue_sort) == (None, None)
    assert (
        resolved.resolved_month,
        resolved.resolved_sort,
        resolved.resolved_by,
        resolved.resolved_how,
    ) == ("R#2026-12", f"2026-12-01T10:00:00.000000Z#{case.case_id}", "ada", "RETRY_COMMIT")


def test_a_declined_reopen_keeps_the_resolution_and_its_listing():
    """Asking to reopen takes the case out of the resolved list; declining puts it back
    as it was resolved, not as the supervisor's decline."""
    resolved = case_indexed(
        case_disposed(
            a_case(), grounds(when="2026-11-30T09:00:00"), Disposition.DUPLICATE_REJECTED_OK
        ).case
    )
    reopen = _request(Override.REOPEN, pinned=3, prior=CaseState.RESOLVED)
    asked = case_indexed(case_override_requested(resolved, grounds(), reopen).case)
    assert (asked.state, asked.queue, asked.resolved_month) == (
        CaseState.OVERRIDE_REQUESTED,
        Queue.OVERRIDE_REQUESTED,
        None,
    )
    declined = case_indexed(
        case_override_rejected(asked, grounds(SAM, "2026-12-02T10:00:00"), reopen).case
    )
    assert declined.state == CaseState.RESOLVED and declined.override is None
    assert declined.resolution == resolved.resolution
    assert (declined.resolved_sort, declined.resolved_by) == (resolved.resolved_sort, "ada")
    assert declined.last_actor == "sam"


def test_an_approved_override_resolves_or_reopens():
    """RELEASE_CLAIM resolves the case naming who asked; REOPEN opens it again without
    its resolution; both clear the request and record it in the event's detail."""
    case = case_override_requested(
        a_case(), grounds(), _request(Override.RELEASE_CLAIM, pinned=2)
    ).case
    released, event = case_override_approved(case, grounds(SAM), case.override)
    assert released.state == CaseState.RESOLVED and released.override is None
    assert released.resolution is not None
    assert (released.resolution.disposition, released.resolution.requested_by) == (
        Override.RELEASE_CLAIM,
        "ada",
    )
    assert (event.action, event.disposition) == (
        AuditAction.OVERRIDE_APPROVED,
        Override.RELEASE_CLAIM,
    )
    assert event.detail == {"request": _request(Override.RELEASE_CLAIM, pinned=2).to_json()}
    reopen = _request(Override.REOPEN, pinned=4, prior=CaseState.RESOLVED)
    asked = case_override_requested(released, grounds(), reopen).case
    reopened = case_indexed(case_override_approved(asked, grounds(SAM), reopen).case)
    assert (reopened.state, reopened.resolution, reopened.queue) == (
        CaseState.OPEN,
        None,
        Queue.STUCK_PENDING,
    )


def test_an_expired_request_returns_the_case_by_the_system():
    """An expiry returns the case to the state the request was raised from."""
    request = _request(Override.VOID_PLEDGE, pinned=2, prior=CaseState.ESCALATED)
    asked = case_override_requested(a_case(state=CaseState.ESCALATED), grounds(), request).case
    system = grounds(actor("system", Role.SYSTEM), action_id="expire-req-1", reason=False)
    expired, event = case_override_expired(asked, system, request)
    assert (expired.state, expired.override) == (CaseState.ESCALATED, None)
    assert event.action == AuditAction.OVERRIDE_EXPIRED
    assert event.audit(asked, expired).reason_code is None


@pytest.mark.parametrize("pinned_at_read", [True, False])
def test_an_assignment_carries_a_current_pin_only(pinned_at_read):
    """Assigning a case whose pending request is pinned to the version read moves the
    pin with it; a pin left behind by a material change stays behind."""
    request = _request(Override.RELEASE_CLAIM, pinned=2 if pinned_at_read else 1)
    asked = replace(a_case(), version=2, state=CaseState.OVERRIDE_REQUESTED, override=request)
    assigned, event = case_assigned(asked, grounds(reason=False), "ada")
    assert assigned.override is not None
    assert assigned.override.pinned_version == (3 if pinned_at_read else 1)
    assert (assigned.assignee, event.action) == ("ada", AuditAction.CASE_ASSIGNED)
    assert event.detail == {"assignee": "ada", "previous_assignee": None}
    released, event = case_assigned(assigned, grounds(reason=False), None)
    assert (released.assignee, event.action) == (None, AuditAction.CASE_UNASSIGNED)


def test_retry_transitions_record_the_outcome():
    """A retry asked for keeps the case open; one that recorded the pledge resolves it;
    one whose unclear outcome opened another case resolves it pointing there, as a
    failure; one that failed leaves it open with the outcome."""
    case = a_case()
    queued = CommitRetry(status=RetryStatus.QUEUED, requested_by="ada", request_id="r-1")
    asked, event = case_retry_asked(case, grounds(), queued)
    assert (asked.state, asked.retry, event.action) == (
        CaseState.OPEN,
        queued,
        AuditAction.RETRY_COMMIT_REQUESTED,
    )
    done = replace(queued, status=RetryStatus.COMMITTED, finished_at="2026-12-01T10:00:00Z")
    system = grounds(actor("system", Role.SYSTEM), action_id="retry-r-1", reason=False)
    resolved, event = case_retry_resolved(asked, system, done)
    assert resolved.resolution is not None
    assert (resolved.resolution.outcome, resolved.resolution.asked_by) == ("committed", "ada")
    assert (event.action, event.detail) == (AuditAction.RETRY_COMMIT_SUCCEEDED, None)
    superseded, event = case_retry_resolved(asked, system, done, superseded_by="C-OTHER")
    assert superseded.resolution is not None
    assert superseded.resolution.superseded_by == "C-OTHER"
    assert event.action == AuditAction.RETRY_COMMIT_FAILED
    assert event.detail == {"outcome": "committed", "superseded_by": "C-OTHER"}
    throttled = replace(queued, status="throttled")
    failed, event = case_retry_failed(asked, system, throttled)
    assert (failed.state, failed.resolution, event.detail) == (
        CaseState.OPEN,
        None,
        {"outcome": "throttled"},
    )


def test_a_redelivery_changes_only_the_version():
    """REDELIVER leaves an undelivered acknowledgement's case open as it was."""
    case = a_case(CaseType.ACK_UNDELIVERED)
    updated, event = case_redelivery_asked(case, grounds(), detail={"delivery": "1/created"})
    assert (
        replace(
            updated,
            version=1,
            last_actor=case.last_actor,
            last_action_at=OPENED_AT,
            last_action_id=None,
        )
        == case
    )
    assert (event.disposition, event.detail) == (Disposition.REDELIVER, {"delivery": "1/created"})


def test_writes_ride_along_without_changing_the_change():
    """Other items and events join a change's transaction in order; the original change
    is left as it was."""
    change = case_escalated(a_case(), grounds())
    more = change.along({"Put": 1}, {"Update": 2}).along({"Put": 3}, events=({"seq": 9},))
    assert more.event.writes == ({"Put": 1}, {"Update": 2}, {"Put": 3})
    assert more.event.events == ({"seq": 9},)
    assert change.event.writes == () and more.case is change.case


def test_a_resolution_stands():
    """A change that would write a new resolution over the one the case carries is
    refused; keeping or clearing it (a decline, a reopen) is not."""
    resolved = case_disposed(a_case(), grounds(), Disposition.DUPLICATE_REJECTED_OK).case
    again = case_disposed(resolved, grounds(SAM), Disposition.CONFIRMED_COMMITTED).case
    with pytest.raises(AlreadyResolved, match="already resolved"):
        _resolution_stands(resolved, again)
    _resolution_stands(resolved, replace(resolved, version=3))
    _resolution_stands(resolved, replace(resolved, resolution=None))
