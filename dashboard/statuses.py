"""The one table from what the domain says to HTTP (docs/design.md §2, §4): the domain names
an outcome or a refusal by kind; only the web edge knows status codes."""

from __future__ import annotations

from reconciliation.cases.changes import CaseError
from reconciliation.claims import outcomes

# The pledge API's answer to each intake outcome kind (docs/design.md §4 outcome table).
INTAKE: dict[str, int] = {
    outcomes.CREATED: 201,
    outcomes.REPLAYED: 200,
    outcomes.IN_PROGRESS: 409,
    outcomes.KEY_REUSED: 422,
    outcomes.THROTTLED: 503,
    outcomes.UNAVAILABLE: 503,
    outcomes.CONFLICT: 409,
    outcomes.CANCELLED: 409,
    outcomes.REJECTED: 500,
    outcomes.TOKEN_PARAMETER_MISMATCH: 422,
    outcomes.OUTCOME_UNKNOWN: 202,
}

# A refused case action, by the refusal's kind (``CaseError.code``).
CASE_REFUSAL = {
    "refused": 422,
    "not_found": 404,
    "not_allowed": 403,
    "invalid_reason": 400,
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
