"""Measuring consumed capacity: ask every call for ``ReturnConsumedCapacity`` (per table
and per index) and add up what DynamoDB reports, per thread, through botocore's events
(simulator, benchmarks). Failed conditional writes, which DynamoDB bills but reports no
capacity for, are added by kind with the units the documented rule bills
(:mod:`reconciliation.dynamo.failed_writes`)."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reconciliation.dynamo.client import dynamodb_client, regions
from reconciliation.dynamo.failed_writes import failed_write_of

if TYPE_CHECKING:
    from botocore.awsrequest import AWSResponse
    from botocore.model import OperationModel
    from mypy_boto3_dynamodb import DynamoDBClient


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
    """Units consumed: ``write`` is every write unit the engine reported (base table and
    indexes), ``index_write`` the part spent on indexes; failed conditional writes are
    counted apart, by kind, with the units billed for them."""

    write: float = 0.0
    read: float = 0.0
    index_write: float = 0.0
    requests: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # failed conditional writes by kind
    failed_units: Counter[str] = field(default_factory=Counter)  # their billed units by kind

    @property
    def base_write(self) -> float:
        return self.write - self.index_write

    @property
    def failed_conditions(self) -> int:
        return sum(self.failed.values())

    @property
    def failed_write(self) -> int:
        return sum(self.failed_units.values())

    def add(self, other: Capacity) -> None:
        self.write += other.write
        self.read += other.read
        self.index_write += other.index_write
        self.requests += other.requests
        self.failed.update(other.failed)
        self.failed_units.update(other.failed_units)


_local = threading.local()


def _ask(params: dict[str, Any], model: OperationModel, **_kwargs: Any) -> None:
    if model.name in OPERATIONS:
        params.setdefault("ReturnConsumedCapacity", "INDEXES")


def _record(
    http_response: AWSResponse,
    parsed: object,
    model: OperationModel,
    context: dict[str, Any] | None = None,
    **_kwargs: Any,
) -> None:
    sink: Capacity | None = getattr(_local, "sink", None)
    if sink is None or not isinstance(parsed, dict):
        return
    sink.requests += 1
    if "Error" in parsed:
        failed = failed_write_of(model.name, context, parsed)
        if failed is not None:
            sink.failed[failed.kind] += 1
            sink.failed_units[failed.kind] += failed.units
    consumed = parsed.get("ConsumedCapacity")
    entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
    for entry in entries:
        units = entry.get("CapacityUnits", 0.0)
        if model.name in READS:
            sink.read += units
        else:
            sink.write += units
            indexes = entry.get("GlobalSecondaryIndexes") or {}
            sink.index_write += sum(i.get("CapacityUnits", 0.0) for i in indexes.values())


@contextlib.contextmanager
def instrumented(also: Iterable[DynamoDBClient] = ()) -> Iterator[None]:
    """Every configured region's shared client, and the clients in ``also`` (the
    simulator's own), ask for and report consumed capacity inside the block."""
    clients = [*(dynamodb_client(r) for r in regions()), *also]
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
