"""The one table from what the domain says to HTTP (docs/design.md §2, §4): the domain names
an outcome or a refusal by kind; only the web edge knows status codes."""

from __future__ import annotations

from reconciliation.cases.changes import CaseError
from reconciliation.claims.outcomes import OutcomeKind

# The pledge API's answer to each intake outcome kind (docs/design.md §4 outcome table).
INTAKE: dict[str, int] = {
    OutcomeKind.CREATED: 201,
    OutcomeKind.REPLAYED: 200,
    OutcomeKind.IN_PROGRESS: 409,
    OutcomeKind.KEY_REUSED: 422,
    OutcomeKind.THROTTLED: 503,
    OutcomeKind.UNAVAILABLE: 503,
    OutcomeKind.CONFLICT: 409,
    OutcomeKind.CANCELLED: 409,
    OutcomeKind.REJECTED: 500,
    OutcomeKind.TOKEN_PARAMETER_MISMATCH: 422,
    OutcomeKind.OUTCOME_UNKNOWN: 202,
}

# A refused case action, by the refusal's kind (``CaseError.code``).
CASE_REFUSAL = {
    "refused": 422,
    "not_found": 404,
    "not_allowed": 403,
    "invalid_reason": 400,
    "invalid_note": 400,
    "case_changed": 409,
    # The evidence read at decision time rules the action out (casework/evidence.py).
    "evidence_refused": 422,
    # A resolution stands until an approved reopen (cases/changes.py).
    "already_resolved": 409,
}


def case_refusal_status(exc: CaseError) -> int:
    return CASE_REFUSAL[exc.code]


def client_answer_status(kind: str | None) -> int | None:
    """The status the client was answered for an intake outcome ``kind`` a case records;
    None when the client got no answer (a worker died before answering)."""
    return INTAKE.get(kind or "")
