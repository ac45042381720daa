"""The suggested next step on an open case, derived from the case and
its live evidence: the action a person would most likely take, a one-line why, and the
reason code and text to pre-fill. Pure: no reads, no writes; nothing here is ever applied
without a person submitting it.

A suggestion only names an action the case page offers (``policy.offered_actions`` for
finance staff), so accepting it can never meet a refusal the page did not foresee; when
the right step is to wait (a retry running, a supervisor deciding, a token still
refused), it names no action and says what to wait for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from reconciliation.actors import Role
from reconciliation.cases.models import Case, retry_in_flight
from reconciliation.cases.policy import DISPOSITIONS, LABELS, OVERRIDES, offered_actions
from reconciliation.cases.vocabulary import (
    CaseAction,
    CaseState,
    CaseType,
    Disposition,
    Override,
    ReasonCode,
    RetryStatus,
)
from reconciliation.casework.evidence import evidence_facts, pledge_matches_case
from reconciliation.claims.models import TOKEN_WINDOW_S, Pledge, PledgeStatus
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.codes import find_code
from reconciliation.dynamo.cancellation import Branch, CancellationCode

if TYPE_CHECKING:
    from reconciliation.casework.selectors import Evidence

# What a finished retry's status is when it put the pledge there (retries.py).
_RETRY_SUCCESS = frozenset(
    {
        OutcomeKind.CREATED,
        OutcomeKind.REPLAYED,
        RetryStatus.COMMITTED,
        RetryStatus.ALREADY_COMMITTED,
    }
)


# A ledger drift case (casework/drift/) has no evidence of its own to weigh: only a person
# comparing the finance records can say what happened, and no step moves money.
_DRIFT_STEP = (
    "Check the intents named below against the finance records, then record Explained, no "
    "correction or Corrected by finance with what you found; nothing is corrected "
    "automatically."
)
_DRIFT_ESCALATED = "Escalated: waiting for a supervisor's decision on the ledger difference."

# An undelivered acknowledgement (reconciliation/acks/undelivered.py): the pledge is
# recorded either way; the question is only whether the tenant's receiver hears of it.
_ACK_STEP = (
    "Check with the tenant that its receiver answers again, then Redeliver (fresh attempts, "
    "same webhook-id; close the case once the delivery shows delivered on the pledge "
    "page), or Close without delivery saying why."
)
_ACK_ESCALATED = "Escalated: waiting for a supervisor's decision on the acknowledgement."


@dataclass(frozen=True)
class Suggestion:
    """``action`` is a disposition or override code, or ``None`` when the next step is to
    wait; ``why`` is one line; ``reason_code`` and ``reason_text`` pre-fill the form."""

    action: CaseAction | None
    why: str
    reason_code: ReasonCode | None = None
    reason_text: str = ""

    @property
    def label(self) -> str:
        return LABELS.get(self.action, "") if self.action else ""

    @property
    def form(self) -> str | None:
        """Which form of the case page takes the action: ``dispose`` or ``override``."""
        if self.action in DISPOSITIONS:
            return "dispose"
        if self.action in OVERRIDES:
            return "override"
        return None


def _minutes(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return f"{minutes} min"


def _cancel_branch(case: Case) -> str:
    """The branch of the whole cancelled transaction, from its decoded rows: a lost claim
    outranks a duplicate, which outranks a refusal and a retryable conflict, as the write
    path ranks them."""
    branches = {r.branch for r in case.decoded}
    for branch in (Branch.LOST_CLAIM, Branch.DUPLICATE, Branch.REJECT, Branch.RETRYABLE):
        if branch in branches:
            return branch
    return Branch.REJECT


def _failed_codes(case: Case) -> str:
    """The cancellation reasons of the failed items, in words ("Conflict with another
    request"), each once."""
    codes = [CancellationCode.words(r.code).lower() for r in case.decoded if r.failed]
    return ", ".join(dict.fromkeys(codes)) or "no reason given"


def _code_words(value: object) -> str:
    """A stored code (a retry's outcome kind) in words, lower case; as given if unknown."""
    code = find_code(value)
    return code.label.lower() if code is not None else str(value or "")


def _candidate(case: Case, evidence: Evidence) -> Suggestion:
    """What the evidence points to, before checking that the page offers it."""
    if evidence.pledge is not None:
        return _pledge_found(case, evidence.pledge)
    intent = case.intent_id
    retry = case.retry
    if retry is not None and retry.finished and retry.status not in _RETRY_SUCCESS:
        return Suggestion(
            Disposition.ESCALATE,
            f"The last commit retry failed ({_code_words(retry.status)}) and no pledge "
            "exists: "
            "Escalate for a closer look.",
            ReasonCode.NEEDS_REVIEW,
            f"The commit retry failed ({_code_words(retry.status)}); no pledge for {intent}.",
        )
    if case.case_type == CaseType.CANCELLED_TRANSACTION:
        return _cancelled(case)
    if case.case_type == CaseType.TOKEN_MISMATCH:
        return _token_refused(case, evidence)
    return _no_pledge(case, evidence)


def _pledge_found(case: Case, pledge: Pledge) -> Suggestion:
    """A pledge holds the key: voided, of another payload, or this intent's."""
    intent = case.intent_id
    if pledge.status != PledgeStatus.RECORDED:
        return Suggestion(
            Disposition.ESCALATE,
            "The pledge for this intent was voided by an approved override: nothing to "
            "commit again; Escalate for a closer look.",
            ReasonCode.NEEDS_REVIEW,
            f"The pledge for {intent} is voided; this case needs a closer look.",
        )
    if not pledge_matches_case(pledge, case):
        if case.case_type in (CaseType.CANCELLED_TRANSACTION, CaseType.TOKEN_MISMATCH):
            return Suggestion(
                Disposition.DUPLICATE_REJECTED_OK,
                "A pledge with a different payload holds this key and this transaction "
                "wrote nothing: Duplicate correctly rejected.",
                ReasonCode.DUPLICATE_VERIFIED,
                f"A consistent read finds a pledge for {intent} with a different payload; "
                "this transaction wrote nothing.",
            )
        return Suggestion(
            Disposition.ESCALATE,
            "A pledge with a different payload holds this key: this request was not what "
            "got recorded. Escalate for a closer look.",
            ReasonCode.NEEDS_REVIEW,
            f"The pledge recorded for {intent} has a different payload than this request.",
        )
    if pledge.request_token == case.request_token:
        return Suggestion(
            Disposition.CONFIRMED_COMMITTED,
            "A pledge is recorded with this attempt's token: Confirm committed.",
            ReasonCode.EVIDENCE_CONFIRMS,
            f"A consistent read finds the pledge for {intent}, recorded with this attempt's token.",
        )
    if case.case_type in (CaseType.CANCELLED_TRANSACTION, CaseType.TOKEN_MISMATCH):
        return Suggestion(
            Disposition.DUPLICATE_REJECTED_OK,
            "A pledge is recorded by another attempt and this transaction wrote nothing: "
            "Duplicate correctly rejected.",
            ReasonCode.DUPLICATE_VERIFIED,
            f"A consistent read finds the pledge for {intent}, recorded by another "
            "attempt; this transaction wrote nothing.",
        )
    return Suggestion(
        Disposition.CONFIRMED_COMMITTED,
        "A pledge is recorded for this intent (by another attempt of the same key): "
        "Confirm committed.",
        ReasonCode.EVIDENCE_CONFIRMS,
        f"A consistent read finds the pledge for {intent}, recorded by another attempt "
        "of the same key.",
    )


def _cancelled(case: Case) -> Suggestion:
    """A cancelled transaction and no pledge: by the branch of its decoded reasons."""
    intent = case.intent_id
    branch = _cancel_branch(case)
    codes = _failed_codes(case)
    if branch == Branch.RETRYABLE:
        return Suggestion(
            Disposition.RETRY_COMMIT,
            f"DynamoDB cancelled the transaction for a passing reason ({codes}) and no "
            "pledge exists: Retry the commit.",
            ReasonCode.TRANSIENT_FAILURE,
            f"Cancelled by {codes}, a transient reason; no pledge for {intent}.",
        )
    if branch == Branch.REJECT:
        return Suggestion(
            Disposition.ESCALATE,
            f"DynamoDB refused an item ({codes}): the same write would fail again, and "
            "no pledge exists. Escalate.",
            ReasonCode.NEEDS_REVIEW,
            f"Refused by {codes}; a retry would fail the same way. No pledge for {intent}.",
        )
    if branch == Branch.LOST_CLAIM:
        return Suggestion(
            Disposition.ESCALATE,
            "Another request took the claim during this commit and no pledge exists yet: "
            "Escalate to follow that request.",
            ReasonCode.NEEDS_REVIEW,
            f"The claim was lost to another request; no pledge for {intent} yet.",
        )
    return Suggestion(
        Disposition.ESCALATE,
        "The transaction was refused as a duplicate, yet no pledge is recorded now: Escalate.",
        ReasonCode.NEEDS_REVIEW,
        f"Refused as a duplicate, but a consistent read finds no pledge for {intent}.",
    )


def _token_refused(case: Case, evidence: Evidence) -> Suggestion:
    """A token another transaction used, and no pledge: wait for its window to close."""
    intent = case.intent_id
    window_left = TOKEN_WINDOW_S - evidence.token_age_s
    if evidence.inside_token_window:
        return Suggestion(
            None,
            "No pledge exists, but another transaction used this attempt's token: a retry "
            f"is refused again until the token window closes (in {_minutes(window_left)}). "
            "Then Retry the commit.",
        )
    return Suggestion(
        Disposition.RETRY_COMMIT,
        "No pledge exists and the token window has closed: Retry the commit as a new "
        "attempt with a token of its own.",
        ReasonCode.TRANSIENT_FAILURE,
        f"No pledge for {intent}; the token window has closed, so a new attempt is safe.",
    )


def _no_pledge(case: Case, evidence: Evidence) -> Suggestion:
    """No pledge and nothing that refuses a retry."""
    intent = case.intent_id
    if evidence.inside_token_window:
        return Suggestion(
            Disposition.RETRY_COMMIT,
            "No pledge exists and the attempt's token window is open: Retry the commit.",
            ReasonCode.TRANSIENT_FAILURE,
            f"A consistent read finds no pledge for {intent}; inside the token window a "
            "retry with the same token applies at most once.",
        )
    return Suggestion(
        Disposition.RETRY_COMMIT,
        "No pledge exists and the token window has closed: Retry the commit (the durable "
        "key still refuses a second pledge).",
        ReasonCode.TRANSIENT_FAILURE,
        f"A consistent read finds no pledge for {intent}; the durable key refuses a "
        "second pledge, so a retry is safe.",
    )


def case_suggestion(case: Case, evidence: Evidence | None) -> Suggestion | None:
    """The next step on ``case`` given ``evidence`` (``None``: the reads failed), or
    ``None`` for a resolved case, which has none."""
    if case.state == CaseState.RESOLVED:
        return None
    if case.state == CaseState.OVERRIDE_REQUESTED:
        override = case.override
        asked = (override.requested_by.username if override else "") or "someone"
        what = LABELS.get(override.action, "an override") if override else "an override"
        return Suggestion(
            None, f"Waiting for a supervisor's decision on {what} (asked by {asked})."
        )
    if retry_in_flight(case):
        return Suggestion(
            None, "A commit retry is running in the background: wait for its outcome."
        )
    if case.is_drift:
        return Suggestion(
            None, _DRIFT_STEP if case.state != CaseState.ESCALATED else _DRIFT_ESCALATED
        )
    if case.is_ack_undelivered:
        if case.state == CaseState.ESCALATED:
            return Suggestion(None, _ACK_ESCALATED)
        return Suggestion(
            Disposition.REDELIVER,
            _ACK_STEP,
            ReasonCode.TRANSIENT_FAILURE,
            "The tenant's receiver answers again; send the acknowledgement once more.",
        )
    if evidence is None:
        return Suggestion(
            None, "The evidence could not be read: refresh it before deciding anything."
        )
    candidate = _candidate(case, evidence)
    if case.state == CaseState.ESCALATED:
        return _escalated(case, evidence, candidate)
    if candidate.action is None or candidate.action in _offered(case, evidence):
        return candidate
    return Suggestion(
        None, f"{candidate.why} ({candidate.label} is not available on this case now.)"
    )


# What the evidence settles by itself: a recorded pledge. An escalated case is closed on
# it like any other; for everything else a supervisor decides.
_SETTLED = (Disposition.CONFIRMED_COMMITTED, Disposition.DUPLICATE_REJECTED_OK)


def _offered(case: Case, evidence: Evidence) -> list[CaseAction]:
    facts = evidence_facts(case=case, pledge=evidence.pledge, claim=evidence.claim)
    return offered_actions(
        case.case_type, case.state, Role.FINANCE_STAFF, facts, retry_running=retry_in_flight(case)
    )


def _escalated(case: Case, evidence: Evidence, candidate: Suggestion) -> Suggestion:
    """An escalated case waits for a supervisor's decision unless the evidence settled
    it; the step the evidence points to is still named (and offered to accept), or,
    where that is escalating again, releasing the claim so the client may retry."""
    offered = _offered(case, evidence)
    if candidate.action in _SETTLED and candidate.action in offered:
        return candidate
    waiting = "Escalated: waiting for a supervisor's decision."
    if candidate.action is None:
        return Suggestion(None, f"{waiting} {candidate.why}")
    if candidate.action != Disposition.ESCALATE:
        if candidate.action in offered:
            return replace(candidate, why=f"{waiting} The evidence: {candidate.why}")
        return Suggestion(None, f"{waiting} The evidence: {candidate.why}")
    if Override.RELEASE_CLAIM in offered:
        return Suggestion(
            Override.RELEASE_CLAIM,
            f"{waiting} No commit fits the evidence: Release the claim so the client may "
            "retry (a supervisor approves).",
            ReasonCode.NEEDS_REVIEW,
            candidate.reason_text or f"No commit fits the evidence for {case.intent_id}.",
        )
    return Suggestion(
        None, f"{waiting} No commit fits the evidence, and the claim cannot be released."
    )


def resolution_words(case: Case) -> str:
    """What a resolution did, in words, where the disposition alone does not say it: a
    background retry's outcome, or the case that took over its intent."""
    resolution = case.resolution
    if resolution is None:
        return ""
    if resolution.superseded_by:
        return "the retry's own outcome was unclear, so another case carries the intent"
    outcome = resolution.outcome
    if outcome == OutcomeKind.CREATED:
        return "the pledge was committed by the retry"
    if outcome in _RETRY_SUCCESS:
        return "the pledge was already recorded, so nothing was written again"
    return ""
