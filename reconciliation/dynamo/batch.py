"""Batch reads and writes of many items of one table by key: BatchGetItem with the
unprocessed keys sent again, and boto3's batch writer."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.table import BatchWriter

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from reconciliation.dynamo.items import RawItem

BATCH_GET_KEYS = 100  # DynamoDB's limit per BatchGetItem request


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Sequence[RawItem],
    *,
    projection: str | None = None,
    names: dict[str, str] | None = None,
    rounds: int | None = None,
) -> list[dict[str, Any]]:
    """The items at ``keys`` (raw attribute values; only the projected attributes when
    ``projection`` is given), read consistently, 100 keys a request; absent keys are
    absent from the answer.

    Unprocessed keys (throttled ones) are sent again after a capped backoff, until none
    is left or, given ``rounds``, after that many requests per chunk (what is still
    unprocessed then is left out). The keys must be distinct: DynamoDB refuses a
    request that names one key twice.
    """
    found: list[dict[str, Any]] = []
    for start in range(0, len(keys), BATCH_GET_KEYS):
        wanted: dict[str, Any] = {
            "Keys": keys[start : start + BATCH_GET_KEYS],
            "ConsistentRead": True,
        }
        if projection:
            wanted["ProjectionExpression"] = projection
        if names:
            wanted["ExpressionAttributeNames"] = names
        pending: Mapping[str, Any] = {table: wanted}
        for attempt in itertools.count():
            response = client.batch_get_item(RequestItems=pending)
            found.extend(response.get("Responses", {}).get(table, []))
            pending = response.get("UnprocessedKeys") or {}
            if not pending or (rounds is not None and attempt + 1 >= rounds):
                break
            time.sleep(min(0.05 * 2**attempt, 2.0))
    return found


def batch_writer(client: DynamoDBClient, table: str) -> BatchWriter:
    """boto3's batch writer on a low-level client: puts and deletes (low-level item
    format) go out 25 a request, and what DynamoDB leaves unprocessed is sent again."""
    return BatchWriter(table, client)


def stored_heads(
    client: DynamoDBClient, table: str, key: str, ids: list[str]
) -> dict[str, tuple[int, str]]:
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
