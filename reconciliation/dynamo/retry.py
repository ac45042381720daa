"""Application-level retry of transient DynamoDB errors (docs/design.md §4).

Throttling, ``TransactionConflict`` and ``TransactionInProgressException`` are retried
with exponential backoff and full jitter (a transaction cancelled for a throttled or
conflicting item, and for nothing that says no, too), under a bounded attempt count *and* a time
budget, re-sending the identical request (same ``ClientRequestToken``). The loop is
tenacity's, entered only once a first attempt failed transiently; this module says what
is transient and how long to wait. A ``ConditionalCheckFailedException`` is an answer and
is never retried. The SDK's own standard-mode retries run inside each attempt.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from botocore.exceptions import ClientError
from django.conf import settings
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
)

from reconciliation import metrics
from reconciliation.dynamo.cancellation import CancellationCode
from reconciliation.dynamo.errors import RETRYABLE_CODES, ErrorCode, cancellation_codes, error_code

T = TypeVar("T")

# Cancellation reasons that say "try again", not "no".
RETRYABLE_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
# Of those, the ones that say "throttled": such a cancellation is throttling, answered as
# throttling is (503 past the budget), never as a conflict.
THROTTLING_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})


class RetriesExhausted(Exception):
    """Every attempt within the budget met a transient error; ``last`` is the final one."""

    def __init__(self, last: ClientError, attempts: int):
        super().__init__(f"{error_code(last)} after {attempts} attempts")
        self.last = last
        self.attempts = attempts

    @property
    def code(self) -> str:
        return error_code(self.last)

    @property
    def reason(self) -> str:
        """What the attempts kept meeting (:func:`transient_code` of the last one)."""
        return transient_code(self.last)

    @property
    def throttled(self) -> bool:
        """Whether the attempts were throttled: a throttling code, or a cancellation for
        a throttled item (a conflict is not)."""
        return self.code != ErrorCode.TRANSACTION_CANCELED or self.reason in THROTTLING_REASONS


def is_transient(exc: ClientError) -> bool:
    code = error_code(exc)
    if code in RETRYABLE_CODES:
        return True
    if code == ErrorCode.TRANSACTION_CANCELED:
        reasons = cancellation_codes(exc)
        # Retry only when nothing said "no": every reason is transient or empty.
        return any(r in RETRYABLE_REASONS for r in reasons) and all(
            r in RETRYABLE_REASONS or r == CancellationCode.NONE for r in reasons
        )
    return False


def transient_code(exc: BaseException) -> str:
    """The code a transient error is counted and recorded under: for a cancelled
    transaction, the reason of its item that said "try again" (a throttling reason before
    a conflict: a cancellation with a throttled item is throttling), else the error's own
    code."""
    code = error_code(exc)
    if isinstance(exc, ClientError) and code == ErrorCode.TRANSACTION_CANCELED:
        reasons = cancellation_codes(exc)
        for wanted in (THROTTLING_REASONS, RETRYABLE_REASONS):
            found = next((r for r in reasons if r in wanted), None)
            if found is not None:
                return found
    return code


def full_jitter(base: float, cap: float, rng: random.Random) -> Callable[[RetryCallState], float]:
    """Exponential backoff with full jitter: before attempt ``n + 1``, a uniform wait in
    ``[0, min(cap, base * 2**(n - 1))]``, drawn from ``rng`` (seedable in tests)."""

    def wait(state: RetryCallState) -> float:
        return rng.uniform(0, min(cap, base * (2 ** (state.attempt_number - 1))))

    return wait


def with_retry(
    call: Callable[[], T],
    *,
    attempts: int | None = None,
    budget_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """``call()``, re-sent on transient errors until it answers, ``attempts`` are spent,
    or the next wait would pass ``budget_s`` (then :class:`RetriesExhausted`)."""
    attempts = attempts or settings.DDB_APP_RETRY_ATTEMPTS
    budget_s = settings.DDB_REQUEST_BUDGET_S if budget_s is None else budget_s
    # The first attempt runs bare: nearly every call answers at once, and building and
    # running tenacity's loop (with a Random seeded from the OS) cost ~0.3 ms of CPU per
    # call on the request path. A transient failure becomes the loop's first outcome.
    started = time.monotonic()
    try:
        return call()
    except ClientError as exc:
        if not is_transient(exc):
            raise
        first: list[ClientError] = [exc]

    def again() -> T:
        if first:
            raise first.pop()
        return call()

    def exhausted(state: RetryCallState) -> NoReturn:
        last = state.outcome.exception() if state.outcome else None
        assert isinstance(last, ClientError)
        raise RetriesExhausted(last, state.attempt_number) from last

    def count(state: RetryCallState) -> None:
        last = state.outcome.exception() if state.outcome else None
        if last is not None:
            metrics.APP_RETRIES.labels(transient_code(last)).inc()

    retrying = Retrying(
        # The budget counts from the first attempt, which ran before the loop began.
        stop=stop_after_attempt(attempts)
        | stop_before_delay(budget_s - (time.monotonic() - started)),
        wait=full_jitter(
            settings.DDB_APP_RETRY_BASE_S, settings.DDB_APP_RETRY_CAP_S, rng or random.Random()
        ),
        retry=retry_if_exception(lambda exc: isinstance(exc, ClientError) and is_transient(exc)),
        before_sleep=count,
        retry_error_callback=exhausted,
        sleep=sleep,
    )
    return retrying(again)
