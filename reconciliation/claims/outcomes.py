"""What the pledge intake answers (DESIGN.md §4): the outcome kinds, which the view
maps to HTTP, :class:`IntakeOutcome`, and the answers shared by the claim and the
commit (in progress, throttled, unavailable)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from django.conf import settings

from reconciliation import clock
from reconciliation.claims.models import Claim
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.retry import RetriesExhausted

logger = logging.getLogger(__name__)

# Outcome kinds (the view maps each to its HTTP status).
CREATED = "created"
REPLAYED = "replayed"
IN_PROGRESS = "request_in_progress"
KEY_REUSED = "idempotency_key_reused"
THROTTLED = "throttled"
UNAVAILABLE = "dynamodb_unavailable"
CONFLICT = "transaction_conflict"
CANCELLED = "transaction_cancelled"
REJECTED = "transaction_rejected"
TOKEN_PARAMETER_MISMATCH = "token_parameter_mismatch"
OUTCOME_UNKNOWN = "outcome_unknown"
SUCCESS = (CREATED, REPLAYED)
# Every kind above: the view's STATUS map covers exactly these (a test holds it to that),
# so a client of the API, the fault explorer, knows them without importing the view.
OUTCOME_KINDS = frozenset(
    {
        CREATED,
        REPLAYED,
        IN_PROGRESS,
        KEY_REUSED,
        THROTTLED,
        UNAVAILABLE,
        CONFLICT,
        CANCELLED,
        REJECTED,
        TOKEN_PARAMETER_MISMATCH,
        OUTCOME_UNKNOWN,
    }
)


@dataclass(frozen=True)
class IntakeOutcome:
    kind: str
    pledge: dict | None = None
    retry_after: int | None = None
    case_id: str | None = None
    detail: str = ""
    decoded: list[dict] = field(default_factory=list)


def in_progress_outcome(existing: Claim | None) -> IntakeOutcome:
    wait = 1
    if existing is not None:
        wait = max(1, existing.expires_at - clock.epoch())
    return IntakeOutcome(
        IN_PROGRESS,
        retry_after=wait,
        detail="A request with this Idempotency-Key is being processed; retry later.",
    )


def retry_after_s() -> int:
    """Seconds a client should wait before retrying when DynamoDB is busy or away."""
    return max(1, math.ceil(settings.DDB_APP_RETRY_CAP_S * 2))


def throttled_outcome(exc: RetriesExhausted) -> IntakeOutcome:
    return IntakeOutcome(
        THROTTLED,
        retry_after=retry_after_s(),
        detail=f"DynamoDB throttled the request ({exc.code}) past the retry budget.",
    )


def unavailable_outcome(exc: BaseException) -> IntakeOutcome:
    logger.warning("claim failed: %s", error_code(exc))
    return IntakeOutcome(
        UNAVAILABLE,
        retry_after=retry_after_s(),
        detail="DynamoDB could not be reached; nothing was recorded. Retry later.",
    )
