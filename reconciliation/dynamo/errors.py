"""Error codes and one-line explanations of DynamoDB connection problems."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from reconciliation.codes import Code

if TYPE_CHECKING:
    from reconciliation.dynamo.client import Region


class ErrorCode(Code):
    """What DynamoDB or the connection to it answered (``error_code(exc)``), in words."""

    READ_TIMEOUT = (
        "ReadTimeoutError",
        "No answer in time",
        "The request was sent and DynamoDB did not answer before the timeout.",
    )
    CONNECTION_CLOSED = (
        "ConnectionClosedError",
        "Connection lost",
        "The connection closed after the request was sent, before the answer came.",
    )
    ENDPOINT_CONNECTION = (
        "EndpointConnectionError",
        "DynamoDB unreachable",
        "No connection could be made; nothing was sent.",
    )
    CONNECT_TIMEOUT = (
        "ConnectTimeoutError",
        "Connection timed out",
        "No connection could be made in time; nothing was sent.",
    )
    INTERNAL_SERVER_ERROR = (
        "InternalServerError",
        "DynamoDB internal error",
        "DynamoDB failed on its side; the write may or may not have applied.",
    )
    SERVICE_UNAVAILABLE = (
        "ServiceUnavailable",
        "DynamoDB unavailable",
        "DynamoDB could not take the request just then.",
    )
    THROUGHPUT_EXCEEDED = (
        "ProvisionedThroughputExceededException",
        "Out of capacity",
        "The table had no capacity left; retried with backoff.",
    )
    THROTTLING = "ThrottlingException", "Throttled", "DynamoDB throttled the request."
    REQUEST_LIMIT = (
        "RequestLimitExceeded",
        "Account request limit reached",
        "The account's request limit was reached; retried with backoff.",
    )
    TRANSACTION_CONFLICT = (
        "TransactionConflictException",
        "Conflict with another transaction",
        "Another transaction was changing the same item.",
    )
    TRANSACTION_IN_PROGRESS = (
        "TransactionInProgressException",
        "Transaction still in progress",
        "The same request token's transaction was still running.",
    )
    TRANSACTION_CANCELED = (
        "TransactionCanceledException",
        "Transaction cancelled",
        "DynamoDB cancelled the whole transaction; its reasons name the item.",
    )
    TOKEN_MISMATCH = (
        "IdempotentParameterMismatchException",
        "Token reused with other parameters",
        "The request token was used for a different transaction inside its 10 minutes.",
    )
    CONDITION_FAILED = (
        "ConditionalCheckFailedException",
        "Condition failed",
        "The item's condition did not hold.",
    )
    VALIDATION = (
        "ValidationException",
        "Invalid request",
        "DynamoDB refused the request as invalid.",
    )
    ACCESS_DENIED = (
        "AccessDeniedException",
        "Access denied",
        "The credentials may not make this call.",
    )


# Retried by the application with exponential backoff and full jitter, same token.
RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "TransactionInProgressException",
        "InternalServerError",
    }
)
# After these the outcome of a write is unknown: it may or may not have been applied.
AMBIGUOUS_EXCEPTIONS = (ReadTimeoutError, ConnectionClosedError)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        code: str = exc.response.get("Error", {}).get("Code", "Unknown")
        return code
    return type(exc).__name__


def describe_connection_problem(exc: BotoCoreError | ClientError, region: Region) -> str:
    where = region.endpoint_url or f"AWS region {region.name}"
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        fix = (
            "start it with `python manage.py dynamodb_local` (or `make run`)"
            if region.endpoint_url
            else "check network access and AWS_REGION"
        )
        return f"DynamoDB is unreachable at {where}: {fix}, or set DYNAMODB_ENDPOINT_URL."
    if isinstance(exc, NoCredentialsError):
        return (
            f"No AWS credentials for {where}: configure them (AWS_PROFILE, "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or set DYNAMODB_ENDPOINT_URL "
            "for a local engine."
        )
    if isinstance(exc, ReadTimeoutError):
        return f"DynamoDB at {where} accepted the connection but did not answer in time."
    return f"DynamoDB at {where} failed: {error_code(exc)}: {exc}"


# The structured log field of a DynamoDB error (``logger.warning(…, extra=log_fields(exc))``).
DYNAMO_ERROR_CODE = "dynamo_error_code"


def log_fields(exc: BaseException) -> dict[str, str]:
    """``extra=`` for a log line about a DynamoDB error: ``dynamo_error_code``, the code
    DynamoDB or the connection answered (of the last attempt, for retries that ran out),
    as ``dynamo_errors_total{code}`` counts it."""
    # RetriesExhausted (dynamo/retry.py, which imports this module) carries the last
    # attempt's error as ``last``.
    last = getattr(exc, "last", None)
    return {DYNAMO_ERROR_CODE: error_code(last if isinstance(last, BaseException) else exc)}


def cancellation_codes(exc: ClientError) -> list[str]:
    """The ``Code`` of each item of a cancelled transaction, in item order (empty for
    any other error)."""
    if error_code(exc) != ErrorCode.TRANSACTION_CANCELED:
        return []
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons") or []]
