"""Audit events: append-only, hash-chained, one stream per subject (docs/design.md §7).

``seq`` runs 1, 2, 3… per stream and every event is put with
``attribute_not_exists(seq)``, so a stream never forks and never overwrites. ``hash``
is the SHA-256 of the canonical JSON (sorted keys, compact, UTF-8) of everything stored
in the event except ``hash`` itself, ``prev_hash`` chains it to its predecessor.

A writer describes what was done as an :class:`AuditEvent`; :func:`audit_event_build`
places it in its stream (seq, prev_hash, hash) and returns the plain item as stored.
Items are handed back as transaction items, so a caller puts the event in the same
``TransactWriteItems`` as the change it records.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation import clock
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.dynamo.batch import batch_get, batch_writer
from reconciliation.dynamo.errors import ErrorCode
from reconciliation.dynamo.items import RawItem, from_item, to_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS

if TYPE_CHECKING:
    from reconciliation.stores import Store

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def event_hash(event: dict[str, Any]) -> str:
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
    event: AuditEvent, *, stream: str, seq: int, prev_hash: str
) -> dict[str, Any]:
    """``event`` placed at ``seq`` of ``stream`` after ``prev_hash``: the complete item as
    stored, ``hash`` included. Attributes that are ``None`` are not stored (nor hashed)."""
    at = event.at or clock.now()
    event_id = event.event_id or str(uuid.uuid4())
    at_text = clock.iso(at)
    actor = event.actor
    item: dict[str, Any] = {
        "stream": stream,
        "seq": seq,
        "event_id": event_id,
        "at": at_text,
        "day_shard": day_shard(at, event_id),
        "at_id": f"{at_text}#{event_id}",
        "actor": actor.as_audit(),
        "client_address": actor.address,
        "correlation_id": actor.correlation_id,
        "action": event.action,
        "case_id": event.case_id,
        "intent_id": event.intent_id,
        "before": event.before,
        "after": event.after,
        "disposition": event.disposition,
        "reason_code": event.reason_code,
        "reason_text": event.reason_text,
        "detail": event.detail,
        "prev_hash": prev_hash,
    }
    item = {k: v for k, v in item.items() if v is not None}
    item["hash"] = event_hash(item)
    return item


def head_after(event: dict[str, Any]) -> StreamHead:
    return StreamHead(event["stream"], event["seq"], event["hash"])


@dataclass(frozen=True)
class DaySelection:
    """What a ``by_day`` page returns: the items a filter keeps (its expression, with its
    names and values) and, with ``projection``, only those attributes."""

    filter_expression: str | None = None
    names: dict[str, str] | None = None
    values: dict[str, dict[str, Any]] | None = None
    projection: str | None = None


class AuditRepository:
    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.audit_events

    def put_item(self, event: dict[str, Any]) -> dict[str, Any]:
        """The transaction item that appends ``event``; it fails if that ``seq`` exists."""
        return {
            "Put": {
                "TableName": self.table,
                "Item": to_item(event),
                # A second writer of the same seq loses: the stream never forks.
                "ConditionExpression": "attribute_not_exists(seq)",
            }
        }

    def append(self, event: dict[str, Any]) -> bool:
        """Append a single event outside a transaction; False if that seq is taken."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=to_item(event),
                ConditionExpression="attribute_not_exists(seq)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == ErrorCode.CONDITION_FAILED:
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

    def stream_events(self, stream: str, *, since_seq: int = 0) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#s = :s AND seq > :after",
            "ExpressionAttributeNames": {"#s": "stream"},
            "ExpressionAttributeValues": {":s": {"S": stream}, ":after": {"N": str(since_seq)}},
            "ConsistentRead": True,
        }
        for page in self.client.get_paginator("query").paginate(**kwargs):
            events.extend(from_item(i) for i in page.get("Items", []))
        return events

    # --- reads over the ``by_day`` index and bulk loading (audit trail) ---------

    def day_page(
        self,
        day_shard: str,
        *,
        descending: bool = False,
        after: str | None = None,
        start: str | None = None,
        limit: int | None = None,
        select: DaySelection = DaySelection(),
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """One Query page of ``by_day`` for one day shard, in ``at_id`` order.

        ``after`` resumes strictly past an ``at_id`` already consumed (in the direction
        of travel); ``start`` is an inclusive first bound used when nothing has been
        consumed yet. Items come back raw (attribute values), so a caller that needs only
        a few fields pays for no full deserialisation. Returns the items and the
        ``LastEvaluatedKey`` (``None`` on the last page).
        """
        condition = "day_shard = :ds"
        expression_values: dict[str, dict[str, Any]] = {":ds": {"S": day_shard}}
        if after is not None:
            condition += " AND at_id < :pos" if descending else " AND at_id > :pos"
            expression_values[":pos"] = {"S": after}
        elif start is not None:
            condition += " AND at_id <= :pos" if descending else " AND at_id >= :pos"
            expression_values[":pos"] = {"S": start}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_day",
            "KeyConditionExpression": condition,
            "ScanIndexForward": not descending,
        }
        if limit:
            kwargs["Limit"] = limit
        if select.filter_expression:
            kwargs["FilterExpression"] = select.filter_expression
        if select.projection:
            kwargs["ProjectionExpression"] = select.projection
        if select.names:
            kwargs["ExpressionAttributeNames"] = select.names
        if select.values:
            expression_values.update(select.values)
        kwargs["ExpressionAttributeValues"] = expression_values
        response = self.client.query(**kwargs)
        return response.get("Items", []), response.get("LastEvaluatedKey")

    def period_items(
        self, day_shard: str, lo: str, hi: str, *, projection: str, names: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        """Every ``by_day`` item of one day shard with ``lo <= at_id <= hi``, oldest
        first, only the projected attributes (raw attribute values)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_day",
            "KeyConditionExpression": "day_shard = :ds AND at_id BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":ds": {"S": day_shard},
                ":lo": {"S": lo},
                ":hi": {"S": hi},
            },
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": names,
        }
        for page in self.client.get_paginator("query").paginate(**kwargs):
            yield from page.get("Items", [])

    def event_at(self, stream: str, seq: int) -> dict[str, Any] | None:
        """The stored event at ``(stream, seq)``, read consistently, or ``None``."""
        response = self.client.get_item(
            TableName=self.table,
            Key={"stream": {"S": stream}, "seq": {"N": str(seq)}},
            ConsistentRead=True,
        )
        return from_item(response.get("Item"))

    def latest_event(
        self, stream: str, *, action: AuditAction | tuple[AuditAction, ...]
    ) -> dict[str, Any] | None:
        """The newest event of ``stream`` with ``action`` (or one of several), walking
        back from the head."""
        actions = (action,) if isinstance(action, str) else action
        wanted = {f":a{n}": {"S": a} for n, a in enumerate(actions)}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#s = :s",
            "FilterExpression": f"#a IN ({', '.join(wanted)})",
            "ExpressionAttributeNames": {"#s": "stream", "#a": "action"},
            "ExpressionAttributeValues": {":s": {"S": stream}, **wanted},
            "ScanIndexForward": False,
            "ConsistentRead": True,
            "Limit": 25,
        }
        for page in self.client.get_paginator("query").paginate(**kwargs):
            items: list[RawItem] = page.get("Items", [])
            if items:
                return from_item(items[0])
        return None

    def batch_put(self, events: list[dict[str, Any]]) -> None:
        """Bulk-load complete events with BatchWriteItem (boto3's batch writer).

        BatchWriteItem cannot carry a condition, so this overwrites: it is for seeding
        tests and benchmarks and for restores, never for the live append path.
        """
        with batch_writer(self.client, self.table) as writer:
            for event in events:
                writer.put_item(Item=to_item(event))

    def hashes_at(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """Stored ``hash`` of each ``(stream, seq)`` that exists, by BatchGetItem (100 keys
        a request, consistent reads); absent keys are absent from the answer."""
        items = batch_get(
            self.client,
            self.table,
            [{"stream": {"S": s}, "seq": {"N": str(q)}} for s, q in dict.fromkeys(keys)],
            projection="#s, #q, #h",
            names={"#s": "stream", "#q": "seq", "#h": "hash"},
        )
        return {(i["stream"]["S"], int(i["seq"]["N"])): i["hash"]["S"] for i in items}
