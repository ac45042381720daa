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

if TYPE_CHECKING:
    from reconciliation.dynamo.client import Region

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
        return exc.response.get("Error", {}).get("Code", "Unknown")
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


def cancellation_codes(exc: ClientError) -> list[str]:
    """The ``Code`` of each item of a cancelled transaction, in item order (empty for
    any other error)."""
    if error_code(exc) != "TransactionCanceledException":
        return []
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons") or []]
