"""The suggested next step (reconciliation/casework/suggestions.py), case by case: pure
values in, one suggestion out; no tables."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from reconciliation.cases.models import (
    Case,
    CaseRequest,
    CommitRetry,
    OverrideRequest,
    Resolution,
    retry_in_flight,
)
from reconciliation.cases.policy import (
    MIN_REASON_LENGTH,
    REASON_CODES,
    evidence_refusal,
    offered_actions,
)
from reconciliation.cases.vocabulary import CaseState, CaseType
from reconciliation.casework.evidence import evidence_facts
from reconciliation.casework.selectors import Evidence
from reconciliation.casework.suggestions import case_suggestion, resolution_words
from reconciliation.claims.models import Claim, ClaimStatus, Pledge, PledgeStatus
from reconciliation.dynamo.cancellation import DecodedReason
from tests.unit.records import a_case, a_pledge

TOKEN = "11111111-1111-1111-1111-111111111111"
OTHER_TOKEN = "22222222-2222-2222-2222-222222222222"
AT = "2026-11-30T12:00:00Z"


REQUEST = {"donor_ref": "D-1", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}


# A case's parts given below as they are stored, read by their records' translators.
PARTS = {
    "request": CaseRequest,
    "retry": CommitRetry,
    "override": OverrideRequest,
    "resolution": Resolution,
}


def case(case_type=CaseType.STUCK_PENDING, state=CaseState.OPEN, **fields) -> Case:
    # A case carries the request it is about: the pledges below record this same one.
    fields.setdefault("request", dict(REQUEST))
    for name, record in PARTS.items():
        if isinstance(fields.get(name), dict):
            fields[name] = record.from_json(fields[name])
    fields["decoded"] = tuple(DecodedReason.from_json(r) for r in fields.get("decoded", ()))
    suggestion_world = {
        "opened_at": AT,
        "claim_pk": "acme#create_pledge#k-1",
        "intent_id": "acme#k-1",
        "fund": "GENERAL",
        "request_token": TOKEN,
        "token_issued_at": AT,
        "last_action_at": AT,
    }
    return a_case(case_type, state, **{**suggestion_world, **fields})


def pledge(token: str = TOKEN, status=PledgeStatus.RECORDED) -> Pledge:
    return a_pledge(
        intent_id="acme#k-1",
        fund="GENERAL",
        status=status,
        request_token=token,
        created_at=AT,
        ledger_key="GENERAL#USD#0",
    )


def claim(status=ClaimStatus.PENDING) -> Claim:
    return Claim(
        pk="acme#create_pledge#k-1",
        status=status,
        version=1,
        attempt_id="a-1",
        payload_hash="p",
        request_token=TOKEN,
        token_issued_at=AT,
        created_at=AT,
        claimed_at=AT,
        expires_at=0,
        tenant="acme",
        idempotency_key="k-1",
        intent_id="acme#k-1",
        request={},
    )


def evidence(*, pledge_=None, claim_=None, age_s: int = 120) -> Evidence:
    return Evidence(
        read_at=AT,
        claim=claim_ if claim_ is not None else claim(),
        pledge=pledge_,
        ledger=None,
        token_issued_at=AT,
        token_age_s=age_s,
        inside_token_window=age_s < 600,
    )


def decoded(code: str, branch: str) -> list[dict]:
    return [
        {"index": 0, "code": code, "branch": branch, "explanation": "…"},
        {"index": 1, "code": "None", "branch": "none", "explanation": "…"},
    ]


def assert_prefill_is_valid(suggestion) -> None:
    """What "Accept" pre-fills passes the services' own reason checks."""
    assert suggestion.reason_code in REASON_CODES
    assert len(suggestion.reason_text) >= MIN_REASON_LENGTH
    assert suggestion.why and "\n" not in suggestion.why


def test_stuck_no_pledge_inside_the_window_suggests_retry():
    """No pledge and the attempt's token window open: Retry the commit."""
    s = case_suggestion(case(), evidence())
    assert s.action == "RETRY_COMMIT" and s.form == "dispose"
    assert s.why == "No pledge exists and the attempt's token window is open: Retry the commit."
    assert s.reason_code == "TRANSIENT_FAILURE" and "acme#k-1" in s.reason_text
    assert_prefill_is_valid(s)


def test_ambiguous_no_pledge_outside_the_window_still_suggests_retry():
    """Outside the window a retry stays duplicate-safe (the durable key): Retry, saying so."""
    s = case_suggestion(case(CaseType.AMBIGUOUS_TIMEOUT), evidence(age_s=900))
    assert s.action == "RETRY_COMMIT" and "token window has closed" in s.why
    assert "durable key" in s.why
    assert_prefill_is_valid(s)


def test_pledge_with_this_attempts_token_suggests_confirm():
    """A pledge recorded with this attempt's token: Confirm committed."""
    s = case_suggestion(
        case(CaseType.AMBIGUOUS_TIMEOUT),
        evidence(pledge_=pledge(), claim_=claim(ClaimStatus.COMPLETED)),
    )
    assert s.action == "CONFIRMED_COMMITTED"
    assert s.why == "A pledge is recorded with this attempt's token: Confirm committed."
    assert s.reason_code == "EVIDENCE_CONFIRMS"
    assert_prefill_is_valid(s)


def test_stuck_with_another_attempts_pledge_suggests_confirm():
    """The intent was recorded by another attempt of the same key: Confirm committed."""
    s = case_suggestion(case(), evidence(pledge_=pledge(OTHER_TOKEN)))
    assert s.action == "CONFIRMED_COMMITTED" and "another attempt" in s.why


@pytest.mark.parametrize("case_type", [CaseType.CANCELLED_TRANSACTION, CaseType.TOKEN_MISMATCH])
def test_refused_transaction_beside_another_attempts_pledge_is_a_duplicate(case_type):
    """A cancelled or token-mismatched transaction while another attempt's pledge is
    recorded: Duplicate correctly rejected."""
    s = case_suggestion(
        case(case_type, decoded=decoded("ConditionalCheckFailed", "duplicate")),
        evidence(pledge_=pledge(OTHER_TOKEN), claim_=None),
    )
    assert s.action == "DUPLICATE_REJECTED_OK" and s.reason_code == "DUPLICATE_VERIFIED"
    assert_prefill_is_valid(s)


@pytest.mark.parametrize(
    ("code", "branch", "action", "words"),
    [
        ("TransactionConflict", "retryable", "RETRY_COMMIT", "passing reason"),
        ("ValidationError", "reject", "ESCALATE", "would fail again"),
        ("ConditionalCheckFailed", "lost_claim", "ESCALATE", "took the claim"),
        ("ConditionalCheckFailed", "duplicate", "ESCALATE", "refused as a duplicate"),
    ],
)
def test_cancelled_without_a_pledge_follows_the_decoded_reason(code, branch, action, words):
    """A cancelled transaction and no pledge: the decoded reason decides (retry a passing
    conflict; escalate a refusal, a lost claim, or a duplicate whose pledge is gone)."""
    s = case_suggestion(
        case(CaseType.CANCELLED_TRANSACTION, decoded=decoded(code, branch)), evidence()
    )
    assert s.action == action and words in s.why
    assert_prefill_is_valid(s)
    # In words: the cancellation reason reads as its label, never as DynamoDB's code.
    from tests.dashboard.test_labels import CODE_RE

    assert not CODE_RE.findall(f"{s.why} {s.reason_text}"), s


def test_token_mismatch_inside_the_window_says_wait():
    """The token is spent for 10 minutes: a retry now would be refused again; wait."""
    s = case_suggestion(case(CaseType.TOKEN_MISMATCH), evidence(age_s=300))
    assert s.action is None and s.form is None
    assert "until the token window closes (in 5 min)" in s.why


def test_token_mismatch_outside_the_window_suggests_a_new_attempt():
    s = case_suggestion(case(CaseType.TOKEN_MISMATCH), evidence(age_s=700))
    assert s.action == "RETRY_COMMIT" and "new attempt" in s.why
    assert_prefill_is_valid(s)


def test_a_failed_retry_suggests_escalating_and_then_releasing():
    """The last retry failed and no pledge: Escalate; once escalated, Release the claim
    (ESCALATE is no longer offered there)."""
    retry = {"status": "transaction_conflict", "finished_at": AT, "requested_by": "ada"}
    s = case_suggestion(case(retry=retry), evidence())
    assert s.action == "ESCALATE" and "failed (transaction conflict)" in s.why
    s = case_suggestion(case(state=CaseState.ESCALATED, retry=retry), evidence())
    assert s.action == "RELEASE_CLAIM" and s.form == "override"
    assert_prefill_is_valid(s)


def test_escalated_case_waits_for_a_supervisor_naming_what_the_evidence_points_to():
    """Escalated, no pledge: a supervisor decides; the step the evidence points to is
    named (and may be accepted). A recorded pledge settles it like any other case."""
    s = case_suggestion(case(state=CaseState.ESCALATED), evidence())
    assert s.action == "RETRY_COMMIT"
    assert s.why.startswith("Escalated: waiting for a supervisor's decision. The evidence: No")
    s = case_suggestion(case(state=CaseState.ESCALATED), evidence(pledge_=pledge()))
    assert s.action == "CONFIRMED_COMMITTED" and not s.why.startswith("Escalated")
    s = case_suggestion(case(CaseType.TOKEN_MISMATCH, CaseState.ESCALATED), evidence(age_s=60))
    assert s.action is None and s.why.startswith("Escalated: waiting for a supervisor's")


def test_escalated_without_a_releasable_claim_waits_for_a_supervisor():
    retry = {"status": "transaction_conflict", "finished_at": AT}
    s = case_suggestion(
        case(state=CaseState.ESCALATED, retry=retry),
        Evidence(AT, None, None, None, AT, 10, True),
    )
    assert s.action is None and "waiting for a supervisor" in s.why


def test_voided_pledge_suggests_a_closer_look():
    s = case_suggestion(case(), evidence(pledge_=pledge(status=PledgeStatus.VOIDED)))
    assert s.action == "ESCALATE" and "voided" in s.why


def test_awaiting_approval_waits_for_a_supervisor():
    override = {"action": "RELEASE_CLAIM", "requested_by": {"username": "ada"}}
    s = case_suggestion(case(state=CaseState.OVERRIDE_REQUESTED, override=override), evidence())
    assert s.action is None
    assert s.why == (
        "Waiting for a supervisor's decision on Release the claim (client may retry) "
        "(asked by ada)."
    )


def test_a_retry_in_flight_says_wait_for_it():
    queued = case(retry={"status": "queued", "requested_by": "ada"})
    assert retry_in_flight(queued)
    s = case_suggestion(queued, evidence())
    assert s.action is None and "running in the background" in s.why


def test_unknown_evidence_suggests_refreshing():
    s = case_suggestion(case(), None)
    assert s.action is None and "could not be read" in s.why


def test_resolved_case_has_no_suggestion():
    assert case_suggestion(case(state=CaseState.RESOLVED), evidence()) is None


@pytest.mark.parametrize(
    "case_type",
    [
        CaseType.STUCK_PENDING,
        CaseType.AMBIGUOUS_TIMEOUT,
        CaseType.CANCELLED_TRANSACTION,
        CaseType.TOKEN_MISMATCH,
    ],
)
@pytest.mark.parametrize("state", [CaseState.OPEN, CaseState.ESCALATED])
@pytest.mark.parametrize("found", ["none", "mine", "other", "voided", "other_payload"])
def test_a_suggested_action_is_always_one_the_page_offers(case_type, state, found):
    """Whatever the case and the evidence, a suggested action is one the page offers for
    finance staff, so accepting it never meets an evidence refusal."""
    pledges = {
        "none": None,
        "mine": pledge(),
        "other": pledge(OTHER_TOKEN),
        "voided": pledge(status=PledgeStatus.VOIDED),
        "other_payload": replace(pledge(OTHER_TOKEN), amount=Decimal("99.00")),
    }
    ev = evidence(pledge_=pledges[found])
    c = case(case_type, state, decoded=decoded("TransactionConflict", "retryable"))
    s = case_suggestion(c, ev)
    assert s is not None
    if s.action:
        facts = evidence_facts(case=c, pledge=ev.pledge, claim=ev.claim)
        assert facts.pledge_recorded == (found in ("mine", "other", "other_payload"))
        assert s.action in offered_actions(case_type, state, "finance_staff", facts)
        assert evidence_refusal(s.action, facts) is None


def test_resolution_words():
    """A retry's resolution says what it did; other resolutions need no words."""
    done = case(state=CaseState.RESOLVED, resolution={"disposition": "RETRY_COMMIT"})
    created = Resolution.from_json({"outcome": "created"})
    assert resolution_words(replace(done, resolution=created)) == (
        "the pledge was committed by the retry"
    )
    assert "already recorded" in resolution_words(
        replace(done, resolution=Resolution.from_json({"outcome": "already_committed"}))
    )
    assert "another case" in resolution_words(
        replace(done, resolution=Resolution.from_json({"superseded_by": "C-X"}))
    )
    assert resolution_words(done) == ""
