"""The durable pledge record (``pledges``): created only with ``attribute_not_exists``.

Its key, not the claim's, is what makes a pledge exactly-once beyond the 10-minute
token window and beyond the claim's TTL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from reconciliation import clock
from reconciliation.claims.models import Pledge, PledgeStatus, pledge_from_item
from reconciliation.dynamo.batch import batch_get
from reconciliation.dynamo.items import from_item, to_item, values
from reconciliation.dynamo.tables import (
    ack_shard,
    donor_key_query,
    donor_search_key,
    subject_day_shard,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.stores import Store


# A delivery's status as reconciliation/acks/models.py · DeliveryStatus stores it.
ACK_GAVE_UP = "GAVE_UP"
ACK_PENDING = "PENDING"


@dataclass(frozen=True)
class AckDeliverySeen:
    """One delivery of a pledge's acknowledgement (``acks[<endpoint>/<event>]`` on the
    pledge item) as a consistent read found it, with the item's fence: what a
    redelivery is conditioned on."""

    status: str
    attempts: int
    fence: int


class PledgeRepository:
    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.pledges

    @staticmethod
    def _key(intent_id: str) -> dict[str, AttributeValueTypeDef]:
        return {"intent_id": {"S": intent_id}}

    def get(self, intent_id: str, *, consistent: bool = True) -> Pledge | None:
        response = self.client.get_item(
            TableName=self.table, Key=self._key(intent_id), ConsistentRead=consistent
        )
        return pledge_from_item(response.get("Item"))

    def get_many(self, intent_ids: list[str]) -> dict[str, Pledge]:
        """The pledges of ``intent_ids`` found here, by intent id, read consistently
        (one BatchGetItem per 100): a list shows each row's pledge at a cost that follows
        the page, not a read per row."""
        keys = [self._key(i) for i in dict.fromkeys(intent_ids) if i]
        found = (pledge_from_item(item) for item in batch_get(self.client, self.table, keys))
        return {pledge.intent_id: pledge for pledge in found if pledge is not None}

    def intents_for_donor(self, donor_ref: str, *, limit: int = 50) -> list[str]:
        """Intent ids of the pledges of ``donor_ref`` in any letter case, newest first
        (one Query of the sparse ``by_donor_key`` index)."""
        return donor_key_query(self.client, self.table, donor_ref, key="intent_id", limit=limit)

    def put_item(self, pledge: Pledge) -> dict[str, Any]:
        data = {k: getattr(pledge, k) for k in Pledge.__dataclass_fields__}
        # The day it was written, for verification's walk over subjects (``by_day``).
        data["day_shard"] = subject_day_shard(pledge.intent_id, pledge.created_at)
        # The acknowledgement is due from the moment the pledge is recorded: the fact is
        # written by the transaction that records the pledge, so no event exists for an
        # unrecorded one and none is lost for a recorded one (``acks_due``, docs/webhooks.md).
        # Derived from the pledge alone, so a retry under the same token sends the same
        # transaction.
        data["ack_shard"] = ack_shard(pledge.intent_id)
        data["ack_due_at"] = clock.epoch(datetime.fromisoformat(pledge.created_at))
        # The folded donor ref keys ``by_donor_key`` (staff search in any letter case).
        if pledge.donor_ref:
            data["donor_key"] = donor_search_key(pledge.donor_ref)
        return {
            "Put": {
                "TableName": self.table,
                "Item": to_item(data),
                # The durable exactly-once invariant: one pledge per intent, forever.
                "ConditionExpression": "attribute_not_exists(intent_id)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def void_item(self, pledge: Pledge, *, voided_at: str, audit_head: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(pledge.intent_id),
                # The void's acknowledgement (``pledge.voided``) is due from this very
                # write: the pledge is back in ``acks_due`` (docs/webhooks.md).
                "UpdateExpression": (
                    "SET #st = :voided, voided_at = :at, audit_seq = :next_seq, audit_head = :head,"
                    " ack_shard = :ack_shard, ack_due_at = :ack_due"
                ),
                # Only a RECORDED pledge at the audit head we read can be voided once.
                "ConditionExpression": "#st = :recorded AND audit_seq = :seq",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": {
                    ":voided": {"S": PledgeStatus.VOIDED},
                    ":recorded": {"S": PledgeStatus.RECORDED},
                    ":at": {"S": voided_at},
                    ":seq": {"N": str(pledge.audit_seq)},
                    ":next_seq": {"N": str(pledge.audit_seq + 1)},
                    ":head": {"S": audit_head},
                    ":ack_shard": {"S": ack_shard(pledge.intent_id)},
                    ":ack_due": {"N": str(clock.epoch(datetime.fromisoformat(voided_at)))},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def ack_delivery_read(self, intent_id: str, delivery: str) -> AckDeliverySeen | None:
        """The delivery ``delivery`` (``<endpoint>/<event>``) of the pledge, read
        consistently; ``None`` when the pledge or that delivery is not there."""
        item = self.client.get_item(
            TableName=self.table, Key=self._key(intent_id), ConsistentRead=True
        ).get("Item")
        data = from_item(item) if item else {}
        found = (data.get("acks") or {}).get(delivery)
        if not found:
            return None
        return AckDeliverySeen(
            status=str(found.get("status", "")),
            attempts=int(found.get("attempts", 0)),
            fence=int(data.get("ack_fence", 0)),
        )

    def ack_redeliver_item(
        self, intent_id: str, *, delivery: str, seen: AckDeliverySeen, now: int
    ) -> dict[str, Any]:
        """Make the given-up ``delivery`` due now with fresh attempts: the pledge back in
        ``acks_due`` (docs/webhooks.md). Conditioned on what the decider read: the
        delivery still given up, and no record since (the fence it saw). The fence moves
        on, so a dispatcher that read the pledge before this write (one may be sending it
        right now) cannot record its stale deliveries over this one."""
        fence_seen = "ack_fence = :seen" if seen.fence else "attribute_not_exists(ack_fence)"
        vals: dict[str, Any] = {
            "gave_up": ACK_GAVE_UP,
            "pending": ACK_PENDING,
            "zero": 0,
            "now": now,
            "shard": ack_shard(intent_id),
            "fence": seen.fence + 1,
            **({"seen": seen.fence} if seen.fence else {}),
        }
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(intent_id),
                "UpdateExpression": (
                    "SET #acks.#d.#st = :pending, #acks.#d.attempts = :zero,"
                    " #acks.#d.next_at = :now, ack_shard = :shard, ack_due_at = :now,"
                    " ack_fence = :fence"
                ),
                "ConditionExpression": f"#acks.#d.#st = :gave_up AND {fence_seen}",
                "ExpressionAttributeNames": {"#acks": "acks", "#d": delivery, "#st": "status"},
                "ExpressionAttributeValues": values(**vals),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
