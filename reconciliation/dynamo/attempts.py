"""What the SDK's hidden attempts of a call did (docs/design.md §4, the outcome rule).

botocore retries inside one API call and surfaces only the last attempt's error: a
commit whose first attempt applied and lost its response, then met throttling on every
retry, reaches the application as a plain ``ThrottlingException``. The outcome rule needs
to know that an earlier attempt *may* have applied, so a client hook hears every
attempt's result (botocore's ``needs-retry`` event fires after each one, the last
included) and notes it in the :class:`AttemptLog` that the caller opened with
:func:`watch`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

from reconciliation.dynamo.errors import ErrorCode

if TYPE_CHECKING:
    from botocore.awsrequest import AWSResponse
    from mypy_boto3_dynamodb import DynamoDBClient

# Failures that prove the request never left: nothing can have been applied.
NEVER_SENT = (EndpointConnectionError, ConnectTimeoutError)


@dataclass
class AttemptLog:
    attempts: int = 0
    maybe_applied: bool = False

    def heard(self, *, status: int | None, exception: BaseException | None, code: str = "") -> None:
        self.attempts += 1
        if exception is not None:
            # A read timeout or a dropped connection after the request was sent: the
            # engine may have applied it.
            self.maybe_applied |= not isinstance(exception, NEVER_SENT)
        elif status is not None and status >= 500:
            # A 5xx says nothing about whether the write was applied.
            self.maybe_applied = True
        elif code == ErrorCode.TRANSACTION_IN_PROGRESS:
            # A transaction under this token is still in flight: it may yet apply.
            self.maybe_applied = True


_current: ContextVar[AttemptLog | None] = ContextVar("dynamodb_attempt_log", default=None)


@contextlib.contextmanager
def watch() -> Iterator[AttemptLog]:
    """Note every attempt of the DynamoDB calls made inside the block, in this thread."""
    log = AttemptLog()
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


@contextlib.contextmanager
def detached() -> Iterator[None]:
    """Calls made inside the block belong to no enclosing :func:`watch` (another request
    served while the watching one waits)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def _on_attempt(
    response: tuple[AWSResponse, dict[str, Any]] | None = None,
    caught_exception: BaseException | None = None,
    **_kwargs: Any,
) -> None:
    log = _current.get()
    if log is None:
        return
    status = response[0].status_code if response is not None else None
    code = (response[1] or {}).get("Error", {}).get("Code", "") if response is not None else ""
    log.heard(status=status, exception=caught_exception, code=code)


def install(client: DynamoDBClient) -> None:
    # First, so the retry handler's own answer cannot keep it from hearing an attempt.
    client.meta.events.register_first("needs-retry.dynamodb", _on_attempt)
