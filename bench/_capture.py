"""Every DynamoDB call a block of service code makes, with what the engine reported and
what the documented rules say it costs (reconciliation/dynamo/item_size.py).

Each write's targets are read (consistently, by a client of their own that nobody hooks)
before the call is sent and after it returns, so every write's cost can be computed from
the images before and after it: also a write whose response was lost, and a write whose
condition failed (AWS bills the existing item, at least 1 unit; engines report nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import boto3

from reconciliation.dynamo.item_size import item_size, read_units, write_cost, write_units
from reconciliation.dynamo.tables import Table

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
FAILED_CONDITION = "ConditionalCheckFailedException"


def index_key(table_name: str, index_name: str) -> str:
    """How an index's units are keyed: by its table too, since indexes of different tables
    share names (``by_day`` on pledges, cases and audit_events; ``by_donor_key``), and one
    transaction may write two of them. ``/`` is in no table name."""
    return f"{table_name}/{index_name}"


def _keyed(cost: dict[str, int], table: Table) -> dict[str, int]:
    """``write_cost``'s units (the table's, then each index's by its name) keyed apart."""
    return {(n if n == table.name else index_key(table.name, n)): u for n, u in cost.items()}


@dataclass
class Target:
    table: Table
    key: dict
    before: dict | None = None
    after: dict | None = None


@dataclass
class Call:
    step: str
    operation: str
    targets: list[Target] = field(default_factory=list)
    reported: dict[str, float] | None = None  # per table and index name
    error: str | None = None
    read_reported: float = 0.0
    read_computed: float | None = None
    cancellation: list[str] = field(default_factory=list)
    finished: bool = False

    @property
    def writes(self) -> bool:
        return self.operation in WRITES

    def computed(self) -> dict[str, int] | None:
        """Units by the documented rules, per table and index name; ``None`` when the
        rules do not say (a cancelled transaction)."""
        if self.error == "TransactionCanceledException":
            return None
        if self.error == FAILED_CONDITION:
            [target] = self.targets
            return {target.table.name: write_units(item_size(target.before or {}))}
        total: dict[str, int] = {}
        transactional = self.operation == "TransactWriteItems"
        for t in self.targets:
            if self.error and t.before == t.after:
                continue  # refused before it reached the item (throttle, fault)
            cost = write_cost(t.before, t.after, t.table, transactional=transactional)
            for name, units in _keyed(cost, t.table).items():
                total[name] = total.get(name, 0) + units
        return total

    def engine_model(self) -> dict[str, int] | None:
        """What DynamoDB Local reports for a transaction: per table and per index, the
        sum of the *distinct* per-item units (items with equal units count once)."""
        if self.operation != "TransactWriteItems" or self.error:
            return None
        per_name: dict[str, set[int]] = {}
        for t in self.targets:
            cost = write_cost(t.before, t.after, t.table, transactional=True)
            for name, units in _keyed(cost, t.table).items():
                per_name.setdefault(name, set()).add(units)
        return {name: sum(units) for name, units in per_name.items()}


def reported_units(consumed) -> dict[str, float]:
    entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
    units: dict[str, float] = {}
    for entry in entries:
        table = entry["TableName"]
        units[table] = units.get(table, 0.0) + entry.get("Table", entry).get("CapacityUnits", 0.0)
        for name, index in entry.get("GlobalSecondaryIndexes", {}).items():
            # Keyed by table and index: a name shared by two tables' indexes in one
            # transaction (by_day of pledges and of audit_events) once kept only the last.
            key = index_key(table, name)
            units[key] = units.get(key, 0.0) + index["CapacityUnits"]
    return units


class Recorder:
    """Hooks ``clients``; ``with recorder.step("name"):`` tags the calls made inside."""

    def __init__(self, clients, tables: list[Table], endpoint_url: str):
        self.tables = {t.name: t for t in tables}
        self.raw = boto3.client(
            "dynamodb",
            endpoint_url=endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        self.calls: list[Call] = []
        self.label: str | None = None
        for client in clients:
            events = client.meta.events
            events.register("before-parameter-build.dynamodb", self._before)
            for operation in WRITES | READS:
                # First on the operation's own event: a fault hook that raises after the
                # engine answered (ambiguous_after_commit) must not hide the answer.
                events.register_first(f"after-call.dynamodb.{operation}", self._after)
            events.register("after-call-error.dynamodb", self._failed)

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[list[Call]]:
        start = len(self.calls)
        taken: list[Call] = []
        self.label = label
        try:
            yield taken
        finally:
            self.label = None
            taken.extend(self.calls[start:])
            for call in taken:
                if call.writes and not call.finished:
                    self._finish(call)  # raised before any hook saw an answer

    def image(self, table: Table, key: dict) -> dict | None:
        return self.raw.get_item(TableName=table.name, Key=key, ConsistentRead=True).get("Item")

    def _key(self, table: Table, item: dict) -> dict:
        names = [table.hash_key[0]] + ([table.range_key[0]] if table.range_key else [])
        return {n: item[n] for n in names}

    def _targets(self, operation: str, params: dict) -> list[Target]:
        if operation == "TransactWriteItems":
            found = []
            for entry in params["TransactItems"]:
                ((kind, body),) = entry.items()
                if kind != "ConditionCheck":
                    found.extend(self._targets({"Put": "PutItem"}.get(kind, "UpdateItem"), body))
            return found
        if operation == "BatchWriteItem":
            return [
                self._target(name, r.get("PutRequest", {}).get("Item"), r.get("DeleteRequest"))
                for name, requests in params["RequestItems"].items()
                for r in requests
            ]
        return [self._target(params["TableName"], params.get("Item"), params)]

    def _target(self, name: str, item: dict | None, keyed: dict | None) -> Target:
        table = self.tables[name]
        key = self._key(table, item) if item is not None else keyed["Key"]  # type: ignore[index]
        return Target(table, key, self.image(table, key))

    def _before(self, params, model, context, **_kwargs) -> None:
        if model.name not in WRITES | READS or self.label is None:
            return
        params["ReturnConsumedCapacity"] = "INDEXES"
        call = Call(self.label, model.name)
        if model.name in WRITES:
            call.targets = self._targets(model.name, params)
        elif model.name == "GetItem":
            table = self.tables[params["TableName"]]
            size = item_size(self.image(table, params["Key"]) or {})
            call.read_computed = read_units(size, consistent=bool(params.get("ConsistentRead")))
        context["bench_call"] = call
        self.calls.append(call)

    def _finish(self, call: Call) -> None:
        call.finished = True
        for target in call.targets:
            target.after = self.image(target.table, target.key)

    def _after(self, http_response, parsed, model, context, **_kwargs) -> None:
        call: Call | None = context.get("bench_call")
        if call is None:
            return
        call.error = parsed.get("Error", {}).get("Code") if isinstance(parsed, dict) else None
        reasons = parsed.get("CancellationReasons", []) if isinstance(parsed, dict) else []
        call.cancellation = [r.get("Code", "None") for r in reasons]
        consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
        if call.writes:
            call.reported = reported_units(consumed) if consumed else None
            self._finish(call)
        else:
            entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
            call.read_reported = sum(e.get("CapacityUnits", 0.0) for e in entries)

    def _failed(self, exception, context, **_kwargs) -> None:
        call: Call | None = context.get("bench_call")
        if call is not None and not call.finished:
            call.error = type(exception).__name__
            self._finish(call)
