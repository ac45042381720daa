"""The suggested next step on a case from its evidence (reconciliation/casework/
suggestions.py): pure, and only ever an action the case page offers."""

from __future__ import annotations

import pytest

from reconciliation.actors import Role
from reconciliation.cases.models import CommitRetry, OverrideRequest, Requester, Resolution
from reconciliation.cases.policy import offered_actions
from reconciliation.cases.vocabulary import (
    CaseState,
    CaseType,
    Disposition,
    Override,
    ReasonCode,
    RetryStatus,
)
from reconciliation.casework.evidence import evidence_facts
from reconciliation.casework.selectors import Evidence
from reconciliation.casework.suggestions import case_suggestion
from reconciliation.claims.models import Claim, ClaimStatus, PledgeStatus
from reconciliation.dynamo.cancellation import Branch, CancellationCode, DecodedReason
from tests.unit.records import OPENED_AT, a_case, a_pledge


def _evidence(pledge=None, *, claim=None, inside_token_window: bool = False, token_age_s: int = 60):
    return Evidence(
        read_at="2026-12-01T10:00:00.000000Z",
        claim=claim,
        pledge=pledge,
        ledger=None,
        token_issued_at="2026-12-01T09:59:00.000000Z",
        token_age_s=token_age_s,
        inside_token_window=inside_token_window,
    )


def _open_claim() -> Claim:
    return Claim(
        pk="acme#42",
        status=ClaimStatus.FAILED,
        version=1,
        attempt_id="a-1",
        payload_hash="p",
        request_token="tok-1",
        token_issued_at=OPENED_AT,
        created_at=OPENED_AT,
        claimed_at=OPENED_AT,
        expires_at=0,
        tenant="acme",
        idempotency_key="42",
        intent_id="acme#42",
        request={},
    )


def _decoded(code: CancellationCode, branch: Branch) -> DecodedReason:
    return DecodedReason(
        index=0,
        operation="Put",
        table="pledges",
        key={},
        code=code,
        message="",
        old_item=None,
        attempted=None,
        explanation="Refused.",
        branch=branch,
    )


def test_a_pledge_with_this_token_is_confirmed():
    """The pledge recorded with this attempt's token: confirm, with the reason pre-filled."""
    suggestion = case_suggestion(a_case(), _evidence(a_pledge()))
    assert suggestion is not None
    assert (suggestion.action, suggestion.reason_code, suggestion.form) == (
        Disposition.CONFIRMED_COMMITTED,
        ReasonCode.EVIDENCE_CONFIRMS,
        "dispose",
    )
    assert "acme#42" in suggestion.reason_text


def test_a_duplicate_refused_by_a_cancelled_transaction():
    """A cancelled transaction whose key holds a pledge from another attempt was a
    correctly refused duplicate."""
    case = a_case(CaseType.CANCELLED_TRANSACTION)
    suggestion = case_suggestion(case, _evidence(a_pledge(request_token="tok-other")))
    assert suggestion is not None and suggestion.action == Disposition.DUPLICATE_REJECTED_OK


def test_a_voided_pledge_is_escalated():
    """Nothing to commit again after an approved void: a closer look."""
    suggestion = case_suggestion(a_case(), _evidence(a_pledge(status=PledgeStatus.VOIDED)))
    assert suggestion is not None
    assert (suggestion.action, suggestion.reason_code) == (
        Disposition.ESCALATE,
        ReasonCode.NEEDS_REVIEW,
    )


@pytest.mark.parametrize("inside", [True, False])
def test_no_pledge_on_a_stuck_case_is_retried(inside):
    """No pledge: retry the commit, inside the token window or after it."""
    suggestion = case_suggestion(a_case(), _evidence(inside_token_window=inside))
    assert suggestion is not None
    assert (suggestion.action, suggestion.reason_code) == (
        Disposition.RETRY_COMMIT,
        ReasonCode.TRANSIENT_FAILURE,
    )
    assert ("window is open" in suggestion.why) is inside


def test_a_token_mismatch_waits_for_its_window():
    """A retry would be refused again until the token window closes: wait, and say how
    long; once closed, retry."""
    case = a_case(CaseType.TOKEN_MISMATCH)
    waiting = case_suggestion(case, _evidence(inside_token_window=True, token_age_s=60))
    assert waiting is not None and waiting.action is None and waiting.form is None
    assert "min)" in waiting.why
    closed = case_suggestion(case, _evidence())
    assert closed is not None and closed.action == Disposition.RETRY_COMMIT


@pytest.mark.parametrize(
    ("code", "branch", "action"),
    [
        (CancellationCode.TRANSACTION_CONFLICT, Branch.RETRYABLE, Disposition.RETRY_COMMIT),
        (CancellationCode.CONDITIONAL_CHECK_FAILED, Branch.REJECT, Disposition.ESCALATE),
    ],
)
def test_a_cancelled_transaction_follows_its_reason(code, branch, action):
    """A passing reason is retried; a refusal that would repeat is escalated."""
    case = a_case(CaseType.CANCELLED_TRANSACTION, decoded=(_decoded(code, branch),))
    suggestion = case_suggestion(case, _evidence())
    assert suggestion is not None and suggestion.action == action


def test_a_failed_retry_is_escalated():
    """A finished retry that recorded nothing, and still no pledge: escalate."""
    retry = CommitRetry(status="throttled", finished_at="2026-12-01T09:00:00Z")
    suggestion = case_suggestion(a_case(retry=retry), _evidence())
    assert suggestion is not None and suggestion.action == Disposition.ESCALATE
    assert "throttled" in suggestion.why


def test_cases_waiting_on_someone_suggest_no_action():
    """Resolved: nothing; a request pending: wait for the supervisor, named; a retry
    running: wait; evidence unread: read it first."""
    resolution = Resolution(Disposition.ESCALATE, "ada", "2026-12-01T10:00:00Z")
    assert case_suggestion(a_case(state=CaseState.RESOLVED, resolution=resolution), None) is None
    request = OverrideRequest(
        request_id="r",
        action=Override.VOID_PLEDGE,
        requested_by=Requester("bob"),
        reason_code=ReasonCode.DONOR_REQUEST,
        reason_text="The donor asked for it.",
        requested_at="2026-12-01T09:00:00Z",
        pinned_version=2,
    )
    asked = a_case(state=CaseState.OVERRIDE_REQUESTED, override=request)
    pending = case_suggestion(asked, _evidence())
    assert pending is not None and pending.action is None
    assert "Void the pledge (asked by bob)" in pending.why
    running = a_case(retry=CommitRetry(status=RetryStatus.QUEUED))
    waiting = case_suggestion(running, _evidence())
    assert waiting is not None and waiting.action is None and "running" in waiting.why
    unread = case_suggestion(a_case(), None)
    assert unread is not None and unread.action is None and "refresh" in unread.why


def test_an_escalated_case_suggests_releasing_when_nothing_commits():
    """Escalated with a rule-out refusal: the candidate ESCALATE is no step; releasing
    the claim, which the page offers, is."""
    case = a_case(
        state=CaseState.ESCALATED,
        decoded=(_decoded(CancellationCode.CONDITIONAL_CHECK_FAILED, Branch.REJECT),),
        case_type=CaseType.CANCELLED_TRANSACTION,
    )
    suggestion = case_suggestion(case, _evidence(claim=_open_claim()))
    assert suggestion is not None
    assert (suggestion.action, suggestion.form) == (Override.RELEASE_CLAIM, "override")
    assert suggestion.why.startswith("Escalated: waiting for a supervisor's decision.")
    gone = case_suggestion(case, _evidence())  # the claim expired (TTL): nothing to release
    assert gone is not None and gone.action is None
    assert gone.why.endswith("the claim cannot be released.")


@pytest.mark.parametrize("case_type", [t for t in CaseType if t != CaseType.LEDGER_DRIFT])
@pytest.mark.parametrize("pledge", [None, "recorded", "other", "voided"])
def test_a_suggestion_is_always_offered_by_the_page(case_type, pledge):
    """Whatever the case and evidence, a suggested action is one the page offers finance
    staff on that case now, so accepting it never meets a refusal."""
    pledges = {
        None: None,
        "recorded": a_pledge(),
        "other": a_pledge(fund="roof"),
        "voided": a_pledge(status=PledgeStatus.VOIDED),
    }
    for state in (CaseState.OPEN, CaseState.ESCALATED):
        case = a_case(case_type, state)
        evidence = _evidence(pledges[pledge])
        suggestion = case_suggestion(case, evidence)
        assert suggestion is not None
        if suggestion.action is not None:
            facts = evidence_facts(case=case, pledge=evidence.pledge)
            offered = offered_actions(case.case_type, case.state, Role.FINANCE_STAFF, facts)
            assert suggestion.action in offered, (case_type, state, pledge, suggestion)
