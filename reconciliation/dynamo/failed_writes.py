"""Failed conditional writes: what they are and what they cost.

DynamoDB bills a conditional write whose condition fails, but reports no consumed
capacity for it (nor does DynamoDB Local): a ``ConditionalCheckFailedException`` carries
no ``ConsumedCapacity``. By the documented rule a failed conditional ``PutItem``,
``UpdateItem`` or ``DeleteItem`` costs the write units of the *existing* item, at least 1.
When the call asked for ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` (the claim does,
docs/design.md §4) the existing item comes back and is sized exactly; otherwise it is taken
as 1 unit. For a transaction cancelled by a failed condition AWS documents no per-item
figure; it is estimated as every action's base-table units at 2×, each on the larger of
the item the request names and the item that came back (1 unit when neither is known).
Index writes are left out of the estimate: nothing was written.

Every failure is counted in ``/metrics`` by kind (``dynamo_failed_conditional_writes_total``
and ``dynamo_failed_conditional_write_units_total``) and is available to the capacity
sink of :mod:`reconciliation.dynamo.capacity`. A kind is the operation and the table
without its prefix: ``put:idempotency_keys`` is a duplicate claim,
``update:idempotency_keys`` a claim fence, ``transaction:pledges`` a commit whose pledge
already existed, ``transaction:cases`` a stale case edit (for a transaction, the table of
the first action whose condition failed).

The hooks run inside every DynamoDB call: they never raise, so an answer they cannot
read is left uncounted rather than turned into an error of the call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciliation import metrics
from reconciliation.dynamo.cancellation import CancellationCode
from reconciliation.dynamo.errors import ErrorCode
from reconciliation.dynamo.item_size import item_size, write_units

if TYPE_CHECKING:
    from botocore.awsrequest import AWSResponse
    from botocore.model import OperationModel
    from mypy_boto3_dynamodb import DynamoDBClient

TABLE_KINDS = ("idempotency_keys", "pledges", "ledger", "cases", "audit_events")
OPERATIONS = {"PutItem": "put", "UpdateItem": "update", "DeleteItem": "delete"}

logger = logging.getLogger(__name__)

# Where a call's reading is kept in botocore's per-call context.
_RESULT = "failed_writes_result"


@dataclass(frozen=True)
class FailedWrite:
    kind: str
    units: int


def table_kind(table_name: str) -> str:
    """The table's name without the deployment's prefix (``pledges-cases`` → ``cases``)."""
    return next((k for k in TABLE_KINDS if table_name.endswith(k)), "other")


def failed_write(
    operation: str, params: dict[str, Any], parsed: dict[str, Any]
) -> FailedWrite | None:
    """The failed conditional write in one call's answer, or None when the call did not
    fail on a condition."""
    code = parsed.get("Error", {}).get("Code")
    if code == ErrorCode.CONDITION_FAILED and operation in OPERATIONS:
        existing = parsed.get("Item")
        units = write_units(item_size(existing)) if existing else 1
        table = table_kind(params.get("TableName", ""))
        return FailedWrite(f"{OPERATIONS[operation]}:{table}", units)
    if code == ErrorCode.TRANSACTION_CANCELED and operation == "TransactWriteItems":
        return _cancelled(params.get("TransactItems", []), parsed.get("CancellationReasons"))
    return None


def _cancelled(
    actions: list[dict[str, Any]], reasons: list[dict[str, Any]] | None
) -> FailedWrite | None:
    reasons = reasons or []
    failing = [
        i
        for i, r in enumerate(reasons)
        if r.get("Code") == CancellationCode.CONDITIONAL_CHECK_FAILED
    ]
    if not failing:
        return None  # a conflict or throttle: no condition failed, nothing billed as one
    units = 0
    for i, action in enumerate(actions):
        [body] = action.values()
        returned = (reasons[i] if i < len(reasons) else None) or {}
        sizes = [item_size(item) for item in (body.get("Item"), returned.get("Item")) if item]
        units += 2 * write_units(max(sizes, default=0))
    [body] = actions[failing[0]].values()
    return FailedWrite(f"transaction:{table_kind(body.get('TableName', ''))}", units)


def _remember_params(
    params: dict[str, Any], context: dict[str, Any] | None = None, **_kwargs: Any
) -> None:
    if context is not None:
        context["failed_writes_params"] = params


def _count(
    http_response: AWSResponse,
    parsed: object,
    model: OperationModel,
    context: dict[str, Any] | None = None,
    **_kwargs: Any,
) -> None:
    if not isinstance(parsed, dict) or "Error" not in parsed:
        return
    failed = failed_write_of(model.name, context, parsed)
    if failed is not None:
        metrics.FAILED_CONDITIONAL_WRITES.labels(failed.kind).inc()
        metrics.FAILED_CONDITIONAL_WRITE_UNITS.labels(failed.kind).inc(failed.units)


def failed_write_of(
    operation: str, context: dict[str, Any] | None, parsed: dict[str, Any]
) -> FailedWrite | None:
    """:func:`failed_write` for a botocore ``after-call`` handler: the request's parameters
    come from the call's context, and an answer that cannot be read counts as nothing.
    Worked out once per call and kept in its context: /metrics and the capacity sink
    both ask."""
    if context is not None and _RESULT in context:
        known: FailedWrite | None = context[_RESULT]
        return known
    params = (context or {}).get("failed_writes_params") or {}
    try:
        failed = failed_write(operation, params, parsed)
    except Exception:  # noqa: BLE001 - a hook must never turn into the call's error
        logger.warning("failed conditional write of %s not counted", operation, exc_info=True)
        failed = None
    if context is not None:
        context[_RESULT] = failed
    return failed


def install(client: DynamoDBClient) -> None:
    """Count every failed conditional write of ``client`` (its ``after-call`` sees the
    parsed error; the request's parameters are kept in the call's context)."""
    client.meta.events.register("before-parameter-build.dynamodb", _remember_params)
    client.meta.events.register("after-call.dynamodb", _count)
