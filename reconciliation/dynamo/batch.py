"""BatchGetItem with a projection, for reads of many items of one table by key."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BATCH_GET_KEYS = 100  # DynamoDB's limit per BatchGetItem request


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: list[dict],
    *,
    projection: str,
    names: dict[str, str],
) -> list[dict]:
    """The items at ``keys`` (raw attribute values, only the projected attributes),
    read consistently, 100 keys a request; absent keys are absent from the answer.

    Unprocessed keys (throttled ones) are sent again after a capped backoff. The keys
    must be distinct: DynamoDB refuses a request that names one key twice.
    """
    found: list[dict] = []
    for start in range(0, len(keys), BATCH_GET_KEYS):
        pending: dict = {
            table: {
                "Keys": keys[start : start + BATCH_GET_KEYS],
                "ProjectionExpression": projection,
                "ExpressionAttributeNames": names,
                "ConsistentRead": True,
            }
        }
        delay = 0.05
        while pending:
            response = client.batch_get_item(RequestItems=pending)
            found.extend(response.get("Responses", {}).get(table, []))
            pending = response.get("UnprocessedKeys") or {}
            if pending:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
    return found


def stored_heads(client: DynamoDBClient, table: str, key: str, ids: list[str]) -> dict:
    """``{id: (audit_seq, audit_head)}`` of the subject items (cases, pledges) with these
    ids; an item without a stored head answers ``(0, "")``, an absent item is absent."""
    distinct = sorted({i for i in ids if i})
    if not distinct:
        return {}
    items = batch_get(
        client,
        table,
        [{key: {"S": i}} for i in distinct],
        projection="#k, #seq, #head",
        names={"#k": key, "#seq": "audit_seq", "#head": "audit_head"},
    )
    return {
        item[key]["S"]: (
            int(item["audit_seq"]["N"]) if "audit_seq" in item else 0,
            item["audit_head"]["S"] if "audit_head" in item else "",
        )
        for item in items
    }
