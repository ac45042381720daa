"""Prometheus metrics. Labels are codes and outcomes only: never a donor reference,
an amount, a token or free text (telemetry carries no donor data)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

if TYPE_CHECKING:
    from botocore.awsrequest import AWSResponse
    from botocore.model import OperationModel
    from mypy_boto3_dynamodb import DynamoDBClient

DYNAMO_CALLS = Counter(
    "dynamo_calls_total", "DynamoDB API calls that reached an outcome", ["operation"]
)
DYNAMO_ERRORS = Counter(
    "dynamo_errors_total", "DynamoDB errors by operation and error code", ["operation", "code"]
)
CANCELLATION_REASONS = Counter(
    "dynamo_transaction_cancellation_reasons_total",
    "Reasons in TransactionCanceledException, one per transaction item",
    ["code"],
)
CLAIMS = Counter("claims_total", "Idempotency claims by outcome", ["outcome"])
PLEDGE_OUTCOMES = Counter("pledge_requests_total", "Intake API answers by outcome", ["outcome"])
# The intake request log's buffered entries (claims/request_log_buffer.py): written off the
# request path, so the client's answer was sent whatever became of them. Failed: given up
# after the batch's rounds, by error code (UnprocessedItems: still throttled). Dropped: the
# oldest entry of a full buffer, never written.
INTAKE_REQUEST_LOG_FAILED = Counter(
    "intake_request_log_failures_total",
    "Intake request log entries that could not be written, by error code",
    ["code"],
)
INTAKE_REQUEST_LOG_DROPPED = Counter(
    "intake_request_log_dropped_total",
    "Intake request log entries dropped unwritten from a full buffer (the oldest first)",
)
APP_RETRIES = Counter(
    "dynamo_app_retries_total", "Application-level retries by error code", ["code"]
)
TTL_DELETE_BEFORE_RETRY = Counter(
    "dynamo_ttl_delete_before_retry_total",
    "Claim item absent (TTL-deleted) while the durable pledge already existed",
)
# The ledger drift check (casework/drift/): one intent recorded in two regions, counted
# once per intent; and what each run found, by scope kind (region, all) and outcome.
CROSS_REGION_DUPLICATES = Counter(
    "dynamo_cross_region_duplicate_detected_total",
    "Intents whose pledge was recorded in two regions (found by the ledger drift check)",
)
LEDGER_DRIFT_FOUND = Counter(
    "ledger_drift_found_total",
    "Ledger differences the drift check confirmed, by scope",
    ["scope"],
)
# Failed conditional writes (dynamo/failed_writes.py): DynamoDB bills them and reports
# no capacity for them; counted by kind (operation and table, never a key) with the write
# units the documented rule bills for each.
FAILED_CONDITIONAL_WRITES = Counter(
    "dynamo_failed_conditional_writes_total",
    "Conditional writes whose condition failed, by kind (operation:table)",
    ["kind"],
)
FAILED_CONDITIONAL_WRITE_UNITS = Counter(
    "dynamo_failed_conditional_write_units_total",
    "Write units DynamoDB bills for failed conditional writes (documented rule), by kind",
    ["kind"],
)
# The intake rate limit (dashboard/api/intake_limit.py). The tenant label is the operator's
# name for an API caller (as in TENANT# streams), never donor data.
INTAKE_RATE_LIMITED = Counter(
    "intake_rate_limited_total",
    "Intake requests refused with 429 by the tenant's rate limit",
    ["tenant"],
)
INTAKE_RATE_LIMIT_UNAVAILABLE = Counter(
    "intake_rate_limit_unavailable_total",
    "Intake requests admitted without the rate limit because Redis did not answer",
)
CASES_OPENED = Counter("cases_opened_total", "Reconciliation cases opened", ["case_type"])
# A case change refused because another hand changed the case after this one read it
# (docs/design.md §6): the loser writes nothing. For people it is the 409 page; for system
# actors (retry, sweep, re-check, expiry) this count and a log line are all there is.
CASE_CHANGES_LOST = Counter(
    "case_changes_lost_total",
    "Case changes not written because the case changed after the decider read it",
    ["role", "action"],
)
# A commit cancelled because its claim was taken over (a worker stalled past its lease),
# answered as a replay of the pledge its successor recorded: no case is opened for it.
LATE_COMMITS_REPLAYED = Counter(
    "late_commits_replayed_total",
    "Commits of a worker that lost its claim, answered from the pledge its successor recorded",
)
COMMIT_SECONDS = Histogram(
    "pledge_commit_seconds",
    "Claim plus commit latency in seconds",
    buckets=(
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
    ),
)
# ReplicationLatency (docs/regions.md): from a change's write in one region to its
# application in another, per table (its name without the prefix) and direction. Written
# by ``manage.py replicate_regions``; a histogram, so with PROMETHEUS_MULTIPROC_DIR its
# samples reach /metrics from that process too.
REPLICATION_LATENCY = Histogram(
    "dynamo_replication_latency_seconds",
    "ReplicationLatency: seconds from a change's write to its application in another region",
    ["table", "source", "destination"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60),
)


def _on_after_call(
    http_response: AWSResponse, parsed: object, model: OperationModel, **_kwargs: Any
) -> None:
    DYNAMO_CALLS.labels(model.name).inc()
    error = parsed.get("Error") if isinstance(parsed, dict) else None
    if error and error.get("Code"):
        DYNAMO_ERRORS.labels(model.name, error["Code"]).inc()


def _on_after_call_error(
    exception: BaseException, context: dict[str, Any] | None = None, **kwargs: Any
) -> None:
    operation = kwargs.get("event_name", "").rsplit(".", 1)[-1] or "unknown"
    DYNAMO_ERRORS.labels(operation, type(exception).__name__).inc()


def instrument_client(client: DynamoDBClient) -> None:
    client.meta.events.register("after-call.dynamodb", _on_after_call)
    client.meta.events.register("after-call-error.dynamodb", _on_after_call_error)


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
