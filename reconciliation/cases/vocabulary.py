"""The words of casework: case types, states, queues, dispositions, overrides, reason
codes, retry statuses and error kinds, each a :class:`~reconciliation.codes.Code` with its
label and help text, and which queue a case of a type and state sits in. The records
that use them are :mod:`reconciliation.cases.models`."""

from __future__ import annotations

from typing import TypeAlias

from reconciliation.codes import Code


class CaseType(Code):
    """How a claim's outcome was not clean: the question the case asks."""

    STUCK_PENDING = (
        "STUCK_PENDING",
        "Stuck claim",
        "A worker claimed the key and stopped before the commit answered; no outcome was recorded.",
    )
    AMBIGUOUS_TIMEOUT = (
        "AMBIGUOUS_TIMEOUT",
        "Ambiguous timeout",
        "The commit was sent and its answer lost: it may or may not have applied.",
    )
    CANCELLED_TRANSACTION = (
        "CANCELLED_TRANSACTION",
        "Cancelled transaction",
        "DynamoDB cancelled the transaction as a whole; its reasons name the item.",
    )
    TOKEN_MISMATCH = (
        "TOKEN_MISMATCH",
        "Token mismatch",
        "The request token was used with different parameters inside its 10-minute "
        "window; nothing was written by this request.",
    )
    LEDGER_DRIFT = "LEDGER_DRIFT", "Ledger drift", "A fund's ledger disagrees with its pledges."
    ACK_UNDELIVERED = (
        "ACK_UNDELIVERED",
        "Undelivered acknowledgement",
        "An acknowledgement that could not be delivered after its last attempt.",
    )


class CaseState(Code):
    OPEN = "OPEN", "Open", "Waiting for someone to decide it."
    ESCALATED = "ESCALATED", "Escalated", "Moved aside for a closer look."
    OVERRIDE_REQUESTED = (
        "OVERRIDE_REQUESTED",
        "Override requested",
        "A risky change was asked for; a different supervisor must approve it.",
    )
    RESOLVED = "RESOLVED", "Resolved", "Decided; the case is closed."


class Queue(Code):
    """Queues are the case types, plus two for cases a human moved on."""

    STUCK_PENDING = "STUCK_PENDING", "Stuck claims", CaseType.STUCK_PENDING.help
    AMBIGUOUS_TIMEOUT = "AMBIGUOUS_TIMEOUT", "Ambiguous timeouts", CaseType.AMBIGUOUS_TIMEOUT.help
    CANCELLED_TRANSACTION = (
        "CANCELLED_TRANSACTION",
        "Cancelled transactions",
        CaseType.CANCELLED_TRANSACTION.help,
    )
    TOKEN_MISMATCH = "TOKEN_MISMATCH", "Token mismatches", CaseType.TOKEN_MISMATCH.help
    LEDGER_DRIFT = "LEDGER_DRIFT", "Ledger drift", CaseType.LEDGER_DRIFT.help
    ACK_UNDELIVERED = (
        "ACK_UNDELIVERED",
        "Undelivered acknowledgements",
        CaseType.ACK_UNDELIVERED.help,
    )
    ESCALATED = "ESCALATED", "Escalated", CaseState.ESCALATED.help
    OVERRIDE_REQUESTED = (
        "OVERRIDE_REQUESTED",
        "Awaiting approval",
        CaseState.OVERRIDE_REQUESTED.help,
    )


class Disposition(Code):
    """An evidence-based decision one person may record on a case."""

    CONFIRMED_COMMITTED = (
        "CONFIRMED_COMMITTED",
        "Confirmed committed",
        "A consistent read finds the pledge; the claim is finalised.",
    )
    RETRY_COMMIT = (
        "RETRY_COMMIT",
        "Retry the commit",
        "Re-run the commit in the background: duplicate-safe (the durable key refuses a "
        "second pledge; same token inside the 10-minute window).",
    )
    DUPLICATE_REJECTED_OK = (
        "DUPLICATE_REJECTED_OK",
        "Duplicate correctly rejected",
        "The write was a duplicate and was rightly refused; close the case.",
    )
    ESCALATE = (
        "ESCALATE",
        "Escalate",
        "Move the case to the Escalated queue for a closer look.",
    )
    DRIFT_EXPLAINED = "DRIFT_EXPLAINED", "Explained, no correction", "Understood; close it."
    DRIFT_CORRECTED = "DRIFT_CORRECTED", "Corrected by finance", "Finance made the adjustment."
    REDELIVER = (
        "REDELIVER",
        "Redeliver",
        "Send the acknowledgement again now, with fresh attempts and the same webhook-id; "
        "the case stays open until someone closes it.",
    )
    ACK_CLOSED = (
        "ACK_CLOSED",
        "Close without delivery",
        "Nothing more will be sent; the reason says why (the tenant was told another way, "
        "the endpoint is gone).",
    )


class Override(Code):
    """A risky change: one person asks, a different supervisor approves (four eyes)."""

    RELEASE_CLAIM = (
        "RELEASE_CLAIM",
        "Release the claim (client may retry)",
        "Mark the claim failed so the client may retry with its key.",
    )
    VOID_PLEDGE = (
        "VOID_PLEDGE",
        "Void the pledge",
        "Reverse the recorded pledge and subtract it from the ledger.",
    )
    REOPEN = "REOPEN", "Reopen", "Open the resolved case again."


# What a person may start on a case: a disposition, or an override request.
CaseAction: TypeAlias = Disposition | Override


def case_action(value: str) -> CaseAction:
    """The disposition or override named ``value``; ``ValueError`` for any other."""
    return Disposition.of(value) or Override(value)


class ReasonCode(Code):
    """Why an action was taken; every action carries one, and a written reason."""

    EVIDENCE_CONFIRMS = "EVIDENCE_CONFIRMS", "Evidence (consistent reads) confirms the outcome"
    CLIENT_CONFIRMED = "CLIENT_CONFIRMED", "The client confirmed the intended outcome"
    DUPLICATE_VERIFIED = "DUPLICATE_VERIFIED", "Verified as a duplicate of a recorded pledge"
    TRANSIENT_FAILURE = "TRANSIENT_FAILURE", "A transient failure; safe to retry"
    DONOR_REQUEST = "DONOR_REQUEST", "The donor asked for this change"
    DATA_CORRECTION = "DATA_CORRECTION", "Correcting recorded data"
    SUSPECTED_FRAUD = "SUSPECTED_FRAUD", "Suspected fraud or abuse"
    NEEDS_REVIEW = "NEEDS_REVIEW", "Needs a second opinion"
    OTHER = "OTHER", "Other (explained in the text)"


class RetryStatus(Code):
    """Where a case's background commit retry stands (``case.retry.status``); once run,
    the status is the commit's outcome kind (:class:`~reconciliation.claims.outcomes.
    OutcomeKind`), or one of these."""

    QUEUED = "queued", "Queued", "Waiting for a background worker to run it."
    ALREADY_COMMITTED = (
        "already_committed",
        "Already committed",
        "The pledge was recorded before the retry ran; nothing was written again.",
    )
    COMMITTED = "committed", "Committed", "The retry recorded the pledge."
    NOTHING_TO_DO = "nothing_to_do", "Nothing to do", "The case was already decided."


class ErrorKind(Code):
    """Why a claim has no clean outcome (``client_outcome.error``, ``last_error_code``)."""

    WORKER_DIED = (
        "worker_died_between_claim_and_commit",
        "The worker stopped between claim and commit",
        "It claimed the key and never recorded an outcome, so the client got no answer.",
    )
    RELEASED_BY_OVERRIDE = (
        "RELEASED_BY_OVERRIDE",
        "Released by an approved override",
        "A supervisor approved releasing the claim; the client may retry with its key.",
    )


# The types a claim's unclean outcome opens: not the fund-level LEDGER_DRIFT, nor the
# dispatcher's ACK_UNDELIVERED (the pledge is recorded; its acknowledgement is not heard).
NOT_FROM_A_CLAIM = frozenset({CaseType.LEDGER_DRIFT, CaseType.ACK_UNDELIVERED})
CASE_TYPES = tuple(t for t in CaseType if t not in NOT_FROM_A_CLAIM)


QUEUES = tuple(Queue)


# Case types that ask one question about a claim version share its case: a stuck claim
# whose late worker then times out is still one "did it commit?" question, answered once.
# That question keeps the id derivation cases had before types were part of it.
DID_IT_COMMIT = frozenset({CaseType.STUCK_PENDING, CaseType.AMBIGUOUS_TIMEOUT})


def case_question(case_type: CaseType) -> str:
    """The question a case of ``case_type`` asks; one case per question and claim version."""
    return "did_it_commit" if case_type in DID_IT_COMMIT else case_type


def queue_for(case_type: CaseType, state: CaseState) -> Queue | None:
    if state == CaseState.RESOLVED:
        return None
    if state == CaseState.ESCALATED:
        return Queue.ESCALATED
    if state == CaseState.OVERRIDE_REQUESTED:
        return Queue.OVERRIDE_REQUESTED
    return Queue(case_type)
