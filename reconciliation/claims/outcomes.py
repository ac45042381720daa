"""What the pledge intake answers (docs/design.md §4): the outcome kinds, which the view
maps to HTTP, :class:`IntakeOutcome`, and the answers shared by the claim and the
commit (in progress, throttled, unavailable)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from reconciliation import clock
from reconciliation.claims.models import Claim
from reconciliation.codes import Code
from reconciliation.dynamo.errors import DYNAMO_ERROR_CODE, log_fields
from reconciliation.dynamo.retry import RetriesExhausted

logger = logging.getLogger(__name__)


class OutcomeKind(Code):
    """What the intake answered (the web edge maps each kind to its HTTP status)."""

    CREATED = "created", "Created", "The pledge was recorded by this request."
    REPLAYED = "replayed", "Replayed", "The pledge was recorded earlier; its answer was repeated."
    IN_PROGRESS = (
        "request_in_progress",
        "In progress",
        "Another attempt holds the key; retry after the lease.",
    )
    KEY_REUSED = (
        "idempotency_key_reused",
        "Key reused",
        "The key was used before with a different body.",
    )
    THROTTLED = "throttled", "Throttled", "DynamoDB throttled the request past the retry budget."
    UNAVAILABLE = (
        "dynamodb_unavailable",
        "DynamoDB unavailable",
        "DynamoDB could not be reached before anything was written.",
    )
    CONFLICT = (
        "transaction_conflict",
        "Transaction conflict",
        "A concurrent transaction on the same items won; nothing was written.",
    )
    CANCELLED = (
        "transaction_cancelled",
        "Transaction cancelled",
        "DynamoDB cancelled the transaction for a reason worth retrying; nothing was written.",
    )
    REJECTED = (
        "transaction_rejected",
        "Transaction rejected",
        "DynamoDB refused the transaction for good; nothing was written.",
    )
    TOKEN_PARAMETER_MISMATCH = (
        "token_parameter_mismatch",
        "Token mismatch",
        "The request token was used with different parameters; nothing was written.",
    )
    OUTCOME_UNKNOWN = (
        "outcome_unknown",
        "Outcome unknown",
        "The commit's answer was lost; the pledge may or may not be recorded.",
    )


SUCCESS = (OutcomeKind.CREATED, OutcomeKind.REPLAYED)
# The web edge's status map covers exactly these (a test holds it to that), so a client
# of the API, the fault explorer, knows them without importing the view.
OUTCOME_KINDS = frozenset(OutcomeKind)


@dataclass(frozen=True)
class IntakeOutcome:
    kind: OutcomeKind
    pledge: dict[str, Any] | None = None
    retry_after: int | None = None
    case_id: str | None = None
    detail: str = ""
    decoded: list[dict[str, Any]] = field(default_factory=list)


def in_progress_outcome(existing: Claim | None) -> IntakeOutcome:
    wait = 1
    if existing is not None:
        wait = max(1, existing.expires_at - clock.epoch())
    return IntakeOutcome(
        OutcomeKind.IN_PROGRESS,
        retry_after=wait,
        detail="A request with this Idempotency-Key is being processed; retry later.",
    )


def retry_after_s() -> int:
    """Seconds a client should wait before retrying when DynamoDB is busy or away."""
    return max(1, math.ceil(settings.DDB_APP_RETRY_CAP_S * 2))


def throttled_outcome(exc: RetriesExhausted) -> IntakeOutcome:
    logger.warning("throttled past the retry budget: %s", exc.reason, extra=log_fields(exc))
    return IntakeOutcome(
        OutcomeKind.THROTTLED,
        retry_after=retry_after_s(),
        detail=f"DynamoDB throttled the request ({exc.reason}) past the retry budget.",
    )


def unavailable_outcome(exc: BaseException) -> IntakeOutcome:
    fields = log_fields(exc)
    logger.warning("claim failed: %s", fields[DYNAMO_ERROR_CODE], extra=fields)
    return IntakeOutcome(
        OutcomeKind.UNAVAILABLE,
        retry_after=retry_after_s(),
        detail="DynamoDB could not be reached; nothing was recorded. Retry later.",
    )
