"""Measuring consumed capacity: ask every call for ``ReturnConsumedCapacity`` and add up
what DynamoDB reports, per thread, through botocore's events (simulator, benchmarks)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from reconciliation.dynamo.client import dynamodb_client, regions

OPERATIONS = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "GetItem",
        "Query",
        "Scan",
        "TransactWriteItems",
        "BatchGetItem",
        "BatchWriteItem",
    }
)
READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem"})


@dataclass
class Capacity:
    write: float = 0.0
    read: float = 0.0
    requests: int = 0
    failed_conditions: int = 0

    def add(self, other: Capacity) -> None:
        self.write += other.write
        self.read += other.read
        self.requests += other.requests
        self.failed_conditions += other.failed_conditions


_local = threading.local()


def _ask(params, model, **_kwargs) -> None:
    if model.name in OPERATIONS:
        params.setdefault("ReturnConsumedCapacity", "TOTAL")


def _record(http_response, parsed, model, **_kwargs) -> None:
    sink: Capacity | None = getattr(_local, "sink", None)
    if sink is None or not isinstance(parsed, dict):
        return
    sink.requests += 1
    if parsed.get("Error", {}).get("Code") in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    ):
        sink.failed_conditions += 1
    consumed = parsed.get("ConsumedCapacity")
    entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
    for entry in entries:
        units = entry.get("CapacityUnits", 0.0)
        if model.name in READS:
            sink.read += units
        else:
            sink.write += units


@contextlib.contextmanager
def instrumented() -> Iterator[None]:
    """Every configured client asks for and reports consumed capacity inside the block."""
    clients = [dynamodb_client(r) for r in regions()]
    for client in clients:
        client.meta.events.register("before-parameter-build.dynamodb", _ask)
        client.meta.events.register("after-call.dynamodb", _record)
    try:
        yield
    finally:
        for client in clients:
            client.meta.events.unregister("before-parameter-build.dynamodb", _ask)
            client.meta.events.unregister("after-call.dynamodb", _record)


@contextlib.contextmanager
def measuring() -> Iterator[Capacity]:
    """What this thread's calls consume inside the block (needs :func:`instrumented`)."""
    sink = Capacity()
    previous = getattr(_local, "sink", None)
    _local.sink = sink
    try:
        yield sink
    finally:
        _local.sink = previous
