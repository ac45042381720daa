"""Decoding ``TransactionCanceledException`` into one row per transaction item (docs/design.md §5).

``CancellationReasons`` are positional: reason *i* belongs to transaction item *i*. Each
row names the operation, table, key, reason code, the returned old item where DynamoDB
sent one, a plain-language explanation, and the branch the write path takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from reconciliation import metrics
from reconciliation.codes import Code
from reconciliation.dynamo.items import from_item


class Branch(Code):
    """The branch the write path takes for a decoded reason (and a whole transaction)."""

    DUPLICATE = (
        "duplicate",
        "Duplicate",
        "The pledge is already recorded; this write must not apply again.",
    )
    LOST_CLAIM = (
        "lost_claim",
        "Claim lost",
        "Another request now holds or finished the claim; this attempt stops.",
    )
    RETRYABLE = "retryable", "Can be retried", "Retry the same request with the same token."
    REJECT = "reject", "Refused", "Retrying the same request would fail again."
    NONE = "none", "Not the cause", "This item was fine."


OPERATIONS = ("Put", "Update", "Delete", "ConditionCheck")


class CancellationCode(Code):
    """A ``CancellationReasons`` code, as DynamoDB names it, with its words."""

    CONDITIONAL_CHECK_FAILED = (
        "ConditionalCheckFailed",
        "Condition failed",
        "The item's condition did not hold.",
    )
    TRANSACTION_CONFLICT = (
        "TransactionConflict",
        "Conflict with another request",
        "Another request was changing this item at the same moment; nothing was written "
        "and the same request can be retried with the same token.",
    )
    ITEM_COLLECTION_SIZE_LIMIT_EXCEEDED = (
        "ItemCollectionSizeLimitExceeded",
        "Item collection full",
        "The item collection for this key is over 10 GB; the write cannot succeed as is.",
    )
    PROVISIONED_THROUGHPUT_EXCEEDED = (
        "ProvisionedThroughputExceeded",
        "Out of capacity",
        "The table or index had no capacity left for this item; retry with backoff.",
    )
    THROTTLING_ERROR = (
        "ThrottlingError",
        "Throttled",
        "DynamoDB throttled this item; retry with backoff.",
    )
    VALIDATION_ERROR = (
        "ValidationError",
        "Invalid request",
        "The request for this item was invalid (a bug or a limit, not a race); retrying "
        "the same request will fail again.",
    )
    NONE = (
        "None",
        "No problem",
        "This item was fine; the transaction was cancelled because of another item.",
    )


_MEANING = {str(code): code.help for code in CancellationCode}


@dataclass(frozen=True)
class DecodedReason:
    """One transaction item's cancellation reason, as a case stores it (``Case.decoded``)
    and the intake API returns it. ``key``, ``old_item`` and ``attempted`` are items of
    whichever table the transaction touched, so they stay plain values."""

    index: int
    operation: str
    table: str
    key: dict[str, Any]
    code: CancellationCode
    message: str
    old_item: dict[str, Any] | None
    attempted: dict[str, Any] | None
    explanation: str
    branch: Branch

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DecodedReason:
        """A stored row; a key an odd row lacks reads as empty (pages show it as given)."""
        return cls(
            index=int(data.get("index", 0)),
            operation=str(data.get("operation", "")),
            table=str(data.get("table", "")),
            key=dict(data.get("key") or {}),
            code=CancellationCode.read(data.get("code")),
            message=str(data.get("message", "")),
            old_item=data.get("old_item"),
            attempted=data.get("attempted"),
            explanation=str(data.get("explanation", "")),
            branch=Branch.read(data.get("branch", "")),
        )

    def to_json(self) -> dict[str, Any]:
        """Every key, always: each writer since the first stores the whole row."""
        return asdict(self)

    @property
    def failed(self) -> bool:
        """Whether this item was the one refused (``None`` is DynamoDB's "this one was fine")."""
        return self.code != CancellationCode.NONE


def _role_of(table: str, tables: dict[str, str]) -> str:
    for role, name in tables.items():
        if name == table:
            return role
    return "unknown"


def _key_of(role: str, operation: str, body: Mapping[str, Any]) -> dict[str, Any]:
    if "Key" in body:
        return from_item(body["Key"]) or {}
    item = from_item(body.get("Item", {})) or {}
    key_names = {
        "pledges": ("intent_id",),
        "idempotency_keys": ("pk",),
        "ledger": ("fund",),
        "cases": ("case_id",),
        "audit_events": ("stream", "seq"),
        # The log entry's subject alone: its sort key is an instant and an id, which
        # says nothing to a reader that the subject does not.
        "requests": ("subject",),
    }.get(role, ())
    return {k: item[k] for k in key_names if k in item}


def _pledge_stream(stream: object) -> bool:
    """Whether ``stream`` is a pledge's audit stream, of the first region
    (``PLEDGE#<intent>``) or another (``PLEDGE#@<region>#<intent>``)."""
    return str(stream or "").startswith("PLEDGE#")


def _explain(
    role: str, code: str, old: dict[str, Any] | None, key: dict[str, Any]
) -> tuple[str, Branch]:
    if code == CancellationCode.CONDITIONAL_CHECK_FAILED:
        if role == "pledges":
            return (
                "The pledge for this intent already exists (the durable record): this "
                "write is a duplicate and must not be applied again.",
                Branch.DUPLICATE,
            )
        if role == "idempotency_keys":
            status = (old or {}).get("status")
            holder = f" It is now {status} at version {old.get('version')}." if old else ""
            return (
                "The claim is no longer held by this attempt: it expired and another "
                f"request re-claimed or finished it.{holder} This attempt must not "
                "complete, fail or delete it.",
                Branch.LOST_CLAIM,
            )
        if role == "audit_events" and _pledge_stream(key.get("stream")):
            return (
                "The pledge's receipt is already in its audit stream: the pledge was "
                "recorded before, so this write is a duplicate.",
                Branch.DUPLICATE,
            )
        if role == "audit_events":
            return (
                "That audit sequence number is already taken: another change was "
                "recorded first; re-read and try again.",
                Branch.LOST_CLAIM,
            )
        if role == "cases":
            return ("The case changed since it was read.", Branch.LOST_CLAIM)
        return (_MEANING[code], Branch.REJECT)
    if code in (
        CancellationCode.TRANSACTION_CONFLICT,
        CancellationCode.PROVISIONED_THROUGHPUT_EXCEEDED,
        CancellationCode.THROTTLING_ERROR,
    ):
        return (_MEANING[code], Branch.RETRYABLE)
    if code == CancellationCode.NONE:
        return (_MEANING["None"], Branch.NONE)
    return (_MEANING.get(code, f"DynamoDB reported {code}."), Branch.REJECT)


def cancellation_decode(
    transact_items: Sequence[Mapping[str, Any]],
    response: Mapping[str, Any],
    tables: dict[str, str],
) -> list[DecodedReason]:
    """Rows for every item of a cancelled transaction, in order.

    ``tables`` maps a role (``pledges``, ``ledger``, …) to its table name, so rows speak
    of roles rather than prefixed physical names.
    """
    reasons = response.get("CancellationReasons") or []
    rows: list[DecodedReason] = []
    for index, item in enumerate(transact_items):
        operation = next(op for op in OPERATIONS if op in item)
        body = item[operation]
        role = _role_of(body["TableName"], tables)
        reason = reasons[index] if index < len(reasons) else {}
        code = CancellationCode.read(reason.get("Code") or "None")
        old = from_item(reason["Item"]) if reason.get("Item") else None
        key = _key_of(role, operation, body)
        explanation, branch = _explain(role, code, old, key)
        attempted = from_item(body["Item"]) if operation == "Put" else None
        if role == "requests":
            # The request log's entry restates this request (its key names it); it is no
            # evidence about the pledge, and its body would only grow the case item.
            attempted = None
        if operation == "Update":
            attempted = {"update": body.get("UpdateExpression", "")}
        rows.append(
            DecodedReason(
                index=index,
                operation=operation,
                table=role,
                key=key,
                code=code,
                message=reason.get("Message", ""),
                old_item=_strip_bulk(old),
                attempted=_strip_bulk(attempted),
                explanation=explanation,
                branch=branch,
            )
        )
        if code != CancellationCode.NONE:
            metrics.CANCELLATION_REASONS.labels(code).inc()
    return rows


def overall_branch(rows: list[DecodedReason]) -> str:
    """The branch for the whole transaction: a lost claim outranks a duplicate (someone
    else owns the outcome), which outranks a retryable conflict; anything else rejects."""
    branches = {r.branch for r in rows}
    for branch in (Branch.LOST_CLAIM, Branch.DUPLICATE, Branch.REJECT, Branch.RETRYABLE):
        if branch in branches:
            return branch
    return Branch.REJECT


def _strip_bulk(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """Keep evidence readable: cached response bodies are summarised, not repeated."""
    if item is None:
        return None
    out = dict(item)
    for bulky in ("response", "request"):
        if bulky in out and isinstance(out[bulky], str) and len(out[bulky]) > 120:
            out[bulky] = out[bulky][:117] + "…"
    readable: dict[str, Any] = _jsonable(out)
    return readable


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, set, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value
