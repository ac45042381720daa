"""The acknowledgement state on the pledge item (``pledges``, index ``acks_due``).

A pledge is in ``acks_due`` while it carries ``ack_shard`` and ``ack_due_at``: the commit
transaction writes both with the pledge (reconciliation/claims/pledges.py), and the
dispatcher removes them once every delivery is settled. Which dispatcher sends is
decided by the lease of the pledge's shard (reconciliation/acks/shard_lease.py); the
pledge itself carries a fence (``ack_fence``, counting the writes of its deliveries): the
write that records an attempt is conditioned on the fence the dispatcher read and moves
it on, so a dispatcher that lost its shard's lease and was overtaken, or that read the
pledge before a redelivery, can never record over the newer write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation.acks.models import AckState, Delivery
from reconciliation.claims.models import PledgeStatus, pledge_from_item
from reconciliation.dynamo.errors import ErrorCode, error_code
from reconciliation.dynamo.index_rows import complete_rows
from reconciliation.dynamo.items import from_item, values
from reconciliation.dynamo.tables import ACK_SHARDS

if TYPE_CHECKING:
    from reconciliation.stores import Store

ACKS_DUE_INDEX = "acks_due"
BATCH_GET_MAX = 100  # DynamoDB's limit of keys per BatchGetItem
# Pages of due pledges read past those in flight, at most (a pass's bound on reads).
MAX_DUE_PAGES = 20
UNPROCESSED_PAUSE_S = 0.05


class LeaseLost(Exception):
    """Another dispatcher took over (its shard's lease), or the pledge's deliveries
    changed since they were read (its fence moved on): nothing was recorded."""


class AckRepository:
    def __init__(self, store: Store):
        self.store = store
        self.client = store.client
        self.table = store.tables.pledges

    @staticmethod
    def shards() -> list[str]:
        return [f"A#{n}" for n in range(ACK_SHARDS)]

    def due(
        self,
        shard: str,
        *,
        now: int,
        limit: int = 100,
        skip: Callable[[str], bool] = lambda intent_id: False,
    ) -> list[str]:
        """Up to ``limit`` intent ids in ``shard`` whose acknowledgement is due by
        ``now``, leaving out those ``skip`` names (a Query of the sparse index: its cost
        grows with due events, not with all pledges). The pledges a dispatcher still has
        in flight are skipped by reading on, a page at a time (at most ``MAX_DUE_PAGES``),
        so a slow endpoint's pledges, the oldest due, never hide the newer ones behind
        them."""
        found: list[str] = []
        start: dict[str, Any] | None = None
        for _ in range(MAX_DUE_PAGES):
            query: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": ACKS_DUE_INDEX,
                "KeyConditionExpression": "ack_shard = :shard AND ack_due_at <= :now",
                "ExpressionAttributeValues": values(shard=shard, now=now),
                "Limit": limit,
            }
            if start:
                query["ExclusiveStartKey"] = start
            response = self.client.query(**query)
            rows = complete_rows(response.get("Items", []), ("intent_id",), index=ACKS_DUE_INDEX)
            for item in rows:
                intent_id = str(item["intent_id"]["S"])
                if not skip(intent_id):
                    found.append(intent_id)
            start = response.get("LastEvaluatedKey")
            if len(found) >= limit or not start:
                break
        return found[:limit]

    def get(self, intent_id: str) -> AckState | None:
        item = self.client.get_item(
            TableName=self.table, Key={"intent_id": {"S": intent_id}}, ConsistentRead=True
        ).get("Item")
        return ack_state_from_item(item) if item else None

    def get_many(self, intent_ids: list[str]) -> list[AckState]:
        """The pledges ``intent_ids``, read consistently, as :meth:`get` reads one: one
        BatchGetItem per 100 (a pass's due pledges at a round trip per hundred, not
        per pledge). Keys DynamoDB leaves unprocessed (throttling) are asked again."""
        states: list[AckState] = []
        for start in range(0, len(intent_ids), BATCH_GET_MAX):
            keys: list[dict[str, Any]] = [
                {"intent_id": {"S": i}} for i in intent_ids[start : start + BATCH_GET_MAX]
            ]
            while keys:
                answer = self.client.batch_get_item(
                    RequestItems={self.table: {"Keys": keys, "ConsistentRead": True}}
                )
                states += [ack_state_from_item(i) for i in answer["Responses"].get(self.table, [])]
                unprocessed: Any = answer.get("UnprocessedKeys") or {}
                keys = list((unprocessed.get(self.table) or {}).get("Keys") or [])
                if keys:
                    time.sleep(UNPROCESSED_PAUSE_S)  # throttled: a moment before asking again
        return states

    def record(
        self,
        intent_id: str,
        *,
        fence: int,
        status: PledgeStatus,
        deliveries: dict[str, Delivery],
        next_due: int | None,
    ) -> int:
        """Record the attempts made on the pledge as read with ``fence`` (its
        ``ack_fence``): due again at ``next_due``, or out of ``acks_due`` when every
        delivery is settled (``None``). ``status`` is the pledge's status the dispatcher
        read. The new fence, or :class:`LeaseLost` when the pledge moved on since."""
        names = {"#acks": "acks", "#st": "status"}
        vals: dict[str, Any] = {
            "acks": {k: d.to_map() for k, d in deliveries.items()},
            "next": fence + 1,
            "status": status,
            **({"fence": fence} if fence else {}),
        }
        if next_due is None:
            update = "SET #acks = :acks, ack_fence = :next REMOVE ack_shard, ack_due_at"
        else:
            update = "SET #acks = :acks, ack_due_at = :due, ack_fence = :next"
            vals["due"] = next_due
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"intent_id": {"S": intent_id}},
                UpdateExpression=update,
                # Only over the pledge as read: a dispatcher that lost its shard's lease
                # and was overtaken, or a redelivery since, moved the fence on.
                # And only for the pledge's status as read: a void since made a new event
                # due, which settling (REMOVE) must not erase; it is sent on the next pass.
                ConditionExpression=(
                    ("ack_fence = :fence" if fence else "attribute_not_exists(ack_fence)")
                    + " AND #st = :status"
                ),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values(**vals),
            )
        except ClientError as exc:
            if error_code(exc) == ErrorCode.CONDITION_FAILED:
                raise LeaseLost(intent_id) from exc
            raise
        return fence + 1


def ack_state_from_item(item: Any) -> AckState:
    """A raw pledge item as its acknowledgement state (for a caller that already holds
    the item, as the explorer's snapshot does)."""
    data = from_item(item)
    pledge = pledge_from_item(item)
    assert pledge is not None
    acks = data.get("acks") or {}
    return AckState(
        intent_id=str(data["intent_id"]),
        tenant=str(data.get("tenant", "")),
        due_at=None if data.get("ack_due_at") is None else int(data["ack_due_at"]),
        fence=int(data.get("ack_fence", 0)),
        deliveries={k: Delivery.from_map(v) for k, v in acks.items()},
        pledge=pledge,
        case_id=data.get("case_id"),
    )
