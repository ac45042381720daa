"""Tables made once per test session (per xdist worker) and reused, emptied, by the next
test: creating and dropping five tables with nine indexes cost every DynamoDB-backed
test 0.2-0.5 s; emptying the few items a test wrote costs a handful of requests.

A pooled set of tables is handed out only when it is empty, so a test sees exactly
what it would on new tables. A test that needs tables no other test has used (one that
derives new table names from its prefix, or alters a table) is marked ``fresh_tables``
and gets a set of its own, dropped afterwards.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.tables import drop_tables, ensure_tables, table_definitions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Above this many items, dropping the tables and making new ones later is cheaper
# than deleting the items one batch at a time.
CLEAR_AT_MOST = 1500


def unique_names(tag: str = "t") -> TableNames:
    return TableNames.from_prefix(f"{tag}{uuid.uuid4().hex[:10]}-")


class TablePool:
    """Idle sets of tables on one engine, reached through ``client`` (a plain client of
    the pool's own: no fault hooks, no metrics, whatever the test configured)."""

    def __init__(self, client: DynamoDBClient, tag: str = "p"):
        self.client = client
        self.tag = tag
        self.idle: list[TableNames] = []
        self.created = 0
        self.reused = 0

    def acquire(self, client: DynamoDBClient) -> TableNames:
        """An empty set of tables: an idle one, or one made now with ``client`` (the
        test's client, so creation goes through the code's own ``ensure_tables``)."""
        if self.idle:
            self.reused += 1
            return self.idle.pop()
        names = unique_names(self.tag)
        ensure_tables(client, names)
        self.created += 1
        return names

    def release(self, names: TableNames) -> None:
        """Empty ``names`` and keep it for the next test, or drop it when it holds too
        much to empty cheaply or cannot be emptied (a table a test dropped)."""
        try:
            emptied = empty_tables(self.client, names, at_most=CLEAR_AT_MOST)
        except ClientError:
            emptied = False
        if emptied:
            self.idle.append(names)
        else:
            drop_tables(self.client, names)


def _keys(client: DynamoDBClient, table: str, key_names: list[str], limit: int) -> list | None:
    """Every item's key in ``table``, or ``None`` when there are more than ``limit``."""
    names = {f"#k{n}": k for n, k in enumerate(key_names)}
    kwargs: dict[str, Any] = {
        "TableName": table,
        "ConsistentRead": True,
        "ProjectionExpression": ", ".join(names),
        "ExpressionAttributeNames": names,
    }
    keys: list = []
    while True:
        page = client.scan(**kwargs)
        keys.extend(page.get("Items", []))
        if len(keys) > limit:
            return None
        if "LastEvaluatedKey" not in page:
            return keys
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def empty_tables(client: DynamoDBClient, names: TableNames, *, at_most: int) -> bool:
    """Delete every item of the tables; ``False`` (nothing promised) when together
    they hold more than ``at_most`` items."""
    found: list[tuple[str, list]] = []
    total = 0
    for table in table_definitions(names):
        key_names = [table.hash_key[0]] + ([table.range_key[0]] if table.range_key else [])
        keys = _keys(client, table.name, key_names, at_most - total)
        if keys is None:
            return False
        total += len(keys)
        found.append((table.name, keys))
    for table_name, keys in found:
        for start in range(0, len(keys), 25):
            requests: Any = {
                table_name: [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            }
            while requests:
                requests = client.batch_write_item(RequestItems=requests).get("UnprocessedItems")
    return True
