"""Audit events: append-only, hash-chained, one stream per subject (DESIGN.md §7).

``seq`` runs 1, 2, 3… per stream and every event is put with
``attribute_not_exists(seq)``, so a stream never forks and never overwrites. ``hash``
is the SHA-256 of the canonical JSON (sorted keys, compact, UTF-8) of everything stored
in the event except ``hash`` itself, ``prev_hash`` chains it to its predecessor.

Events are built as plain values and handed back as transaction items, so a caller puts
the event in the same ``TransactWriteItems`` as the change it records.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation import clock
from reconciliation.actors import Actor
from reconciliation.dynamo.items import from_item, to_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def event_hash(event: dict) -> str:
    body = {k: v for k, v in event.items() if k != "hash"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def day_shard(at: datetime, event_id: str) -> str:
    shard = int(hashlib.sha256(event_id.encode()).hexdigest()[:8], 16) % AUDIT_DAY_SHARDS
    return f"{at.strftime('%Y-%m-%d')}#{shard}"


@dataclass(frozen=True)
class StreamHead:
    stream: str
    seq: int
    hash: str


def audit_event_build(
    *,
    stream: str,
    seq: int,
    prev_hash: str,
    action: str,
    actor: Actor,
    at: datetime | None = None,
    event_id: str | None = None,
    case_id: str | None = None,
    intent_id: str | None = None,
    before: dict | None = None,
    after: dict | None = None,
    disposition: str | None = None,
    reason_code: str | None = None,
    reason_text: str | None = None,
    detail: dict | None = None,
) -> dict:
    """A complete event, ``hash`` included. Values must be JSON-plain (amounts as strings)."""
    at = at or clock.now()
    event_id = event_id or str(uuid.uuid4())
    at_text = clock.iso(at)
    event: dict[str, Any] = {
        "stream": stream,
        "seq": seq,
        "event_id": event_id,
        "at": at_text,
        "day_shard": day_shard(at, event_id),
        "at_id": f"{at_text}#{event_id}",
        "actor": actor.as_audit(),
        "client_address": actor.address,
        "correlation_id": actor.correlation_id,
        "action": action,
        "case_id": case_id,
        "intent_id": intent_id,
        "before": before,
        "after": after,
        "disposition": disposition,
        "reason_code": reason_code,
        "reason_text": reason_text,
        "detail": detail,
        "prev_hash": prev_hash,
    }
    event = {k: v for k, v in event.items() if v is not None}
    event["hash"] = event_hash(event)
    return event


def head_after(event: dict) -> StreamHead:
    return StreamHead(event["stream"], event["seq"], event["hash"])


class AuditRepository:
    def __init__(self, client: DynamoDBClient, table: str):
        self.client = client
        self.table = table

    def put_item(self, event: dict) -> dict:
        """The transaction item that appends ``event``; it fails if that ``seq`` exists."""
        return {
            "Put": {
                "TableName": self.table,
                "Item": to_item(event),
                # A second writer of the same seq loses: the stream never forks.
                "ConditionExpression": "attribute_not_exists(seq)",
            }
        }

    def append(self, event: dict) -> bool:
        """Append a single event outside a transaction; False if that seq is taken."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=to_item(event),
                ConditionExpression="attribute_not_exists(seq)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def head(self, stream: str) -> StreamHead | None:
        response = self.client.query(
            TableName=self.table,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "stream"},
            ExpressionAttributeValues={":s": {"S": stream}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        items = response.get("Items", [])
        if not items:
            return None
        event = from_item(items[0])
        return head_after(event)

    def stream_events(self, stream: str, *, since_seq: int = 0) -> list[dict]:
        events: list[dict] = []
        kwargs: dict = {
            "TableName": self.table,
            "KeyConditionExpression": "#s = :s AND seq > :after",
            "ExpressionAttributeNames": {"#s": "stream"},
            "ExpressionAttributeValues": {":s": {"S": stream}, ":after": {"N": str(since_seq)}},
            "ConsistentRead": True,
        }
        while True:
            response = self.client.query(**kwargs)
            events.extend(from_item(i) for i in response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return events
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
