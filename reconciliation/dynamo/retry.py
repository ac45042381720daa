"""Application-level retry of transient DynamoDB errors (DESIGN.md §4).

Throttling, ``TransactionConflict`` and ``TransactionInProgressException`` are retried
with exponential backoff and full jitter, under a bounded attempt count *and* a time
budget, re-sending the identical request (same ``ClientRequestToken``). A
``ConditionalCheckFailedException`` is an answer and is never retried. The SDK's own
standard-mode retries run inside each attempt.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import ClientError
from django.conf import settings

from reconciliation import metrics
from reconciliation.dynamo.errors import RETRYABLE_CODES, error_code

T = TypeVar("T")

# Cancellation reasons that say "try again", not "no".
RETRYABLE_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


class RetriesExhausted(Exception):
    """Every attempt within the budget met a transient error; ``last`` is the final one."""

    def __init__(self, last: ClientError, attempts: int):
        super().__init__(f"{error_code(last)} after {attempts} attempts")
        self.last = last
        self.attempts = attempts

    @property
    def code(self) -> str:
        return error_code(self.last)


def is_transient(exc: ClientError) -> bool:
    code = error_code(exc)
    if code in RETRYABLE_CODES:
        return True
    if code == "TransactionCanceledException":
        reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
        # Retry only when nothing said "no": every reason is transient or empty.
        return any(r in RETRYABLE_REASONS for r in reasons) and all(
            r in RETRYABLE_REASONS or r == "None" for r in reasons
        )
    return False


def full_jitter_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    return rng.uniform(0, min(cap, base * (2**attempt)))


def with_retry(
    call: Callable[[], T],
    *,
    attempts: int | None = None,
    budget_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    attempts = attempts or settings.DDB_APP_RETRY_ATTEMPTS
    budget_s = settings.DDB_REQUEST_BUDGET_S if budget_s is None else budget_s
    rng = rng or random.Random()
    started = time.monotonic()
    for attempt in range(attempts):
        try:
            return call()
        except ClientError as exc:
            if not is_transient(exc):
                raise
            code = error_code(exc)
            if attempt + 1 >= attempts:
                raise RetriesExhausted(exc, attempt + 1) from exc
            delay = full_jitter_delay(
                attempt, settings.DDB_APP_RETRY_BASE_S, settings.DDB_APP_RETRY_CAP_S, rng
            )
            if time.monotonic() - started + delay > budget_s:
                raise RetriesExhausted(exc, attempt + 1) from exc
            metrics.APP_RETRIES.labels(code).inc()
            sleep(delay)
    raise AssertionError("unreachable")
