"""The acknowledgement state on the pledge item (``pledges``, index ``acks_due``).

A pledge is in ``acks_due`` while it carries ``ack_shard`` and ``ack_due_at``: the commit
transaction writes both with the pledge (reconciliation/claims/pledges.py), and the
dispatcher removes them once every delivery is settled. A delivery is claimed with a
lease (``ack_lease_until``) and a fence (``ack_fence``, counting leases): the write that
records an attempt is conditioned on the fence its lease set, so a dispatcher whose
lease ran out and was taken over can never record over its successor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation.acks.models import AckState, Delivery
from reconciliation.claims.models import pledge_from_item
from reconciliation.dynamo.errors import ErrorCode, error_code
from reconciliation.dynamo.items import from_item, values
from reconciliation.dynamo.tables import ACK_SHARDS

if TYPE_CHECKING:
    from reconciliation.stores import Store

ACKS_DUE_INDEX = "acks_due"


class LeaseLost(Exception):
    """Another dispatcher holds (or took over) this pledge's deliveries."""


class AckRepository:
    def __init__(self, store: Store):
        self.store = store
        self.client = store.client
        self.table = store.tables.pledges

    @staticmethod
    def shards() -> list[str]:
        return [f"A#{n}" for n in range(ACK_SHARDS)]

    def due(self, shard: str, *, now: int, limit: int = 100) -> list[str]:
        """Intent ids in ``shard`` whose acknowledgement is due by ``now`` (a Query of
        the sparse index: its cost grows with due events, not with all pledges)."""
        response = self.client.query(
            TableName=self.table,
            IndexName=ACKS_DUE_INDEX,
            KeyConditionExpression="ack_shard = :shard AND ack_due_at <= :now",
            ExpressionAttributeValues=values(shard=shard, now=now),
            Limit=limit,
        )
        return [str(item["intent_id"]["S"]) for item in response.get("Items", [])]

    def get(self, intent_id: str) -> AckState | None:
        item = self.client.get_item(
            TableName=self.table, Key={"intent_id": {"S": intent_id}}, ConsistentRead=True
        ).get("Item")
        return _from_item(item) if item else None

    def lease(self, state: AckState, *, now: int, lease_s: int) -> int:
        """Take the deliveries of ``state`` for ``lease_s``: the new fence, or LeaseLost."""
        fence = state.fence + 1
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"intent_id": {"S": state.intent_id}},
                UpdateExpression="SET ack_fence = :fence, ack_lease_until = :until",
                # Still due (not settled meanwhile), the fence we read (no other lease
                # since our read), and no live lease (another dispatcher mid-send).
                ConditionExpression=(
                    "attribute_exists(ack_due_at) AND "
                    + ("ack_fence = :seen" if state.fence else "attribute_not_exists(ack_fence)")
                    + " AND (attribute_not_exists(ack_lease_until) OR ack_lease_until <= :now)"
                ),
                ExpressionAttributeValues=values(
                    fence=fence,
                    until=now + lease_s,
                    now=now,
                    **({"seen": state.fence} if state.fence else {}),
                ),
            )
        except ClientError as exc:
            if error_code(exc) == ErrorCode.CONDITION_FAILED:
                raise LeaseLost(state.intent_id) from exc
            raise
        return fence

    def record(
        self,
        intent_id: str,
        *,
        fence: int,
        status: str,
        deliveries: dict[str, Delivery],
        next_due: int | None,
    ) -> None:
        """Record the attempts made under the lease ``fence`` and release it: due again at
        ``next_due``, or out of ``acks_due`` when every delivery is settled (``None``).
        ``status`` is the pledge's status the dispatcher read."""
        names = {"#acks": "acks", "#st": "status"}
        vals: dict[str, Any] = {
            "acks": {k: d.to_map() for k, d in deliveries.items()},
            "fence": fence,
            "status": status,
        }
        if next_due is None:
            update = "SET #acks = :acks REMOVE ack_lease_until, ack_shard, ack_due_at"
        else:
            update = "SET #acks = :acks, ack_due_at = :due REMOVE ack_lease_until"
            vals["due"] = next_due
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"intent_id": {"S": intent_id}},
                UpdateExpression=update,
                # Only under our own lease: a successor that took over has a newer fence.
                # And only for the pledge as read: a void since made a new event due,
                # which settling (REMOVE) must not erase; it is sent on the next pass.
                ConditionExpression="ack_fence = :fence AND #st = :status",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values(**vals),
            )
        except ClientError as exc:
            if error_code(exc) == ErrorCode.CONDITION_FAILED:
                raise LeaseLost(intent_id) from exc
            raise


def _from_item(item: Any) -> AckState:
    data = from_item(item)
    pledge = pledge_from_item(item)
    assert pledge is not None
    acks = data.get("acks") or {}
    return AckState(
        intent_id=str(data["intent_id"]),
        tenant=str(data.get("tenant", "")),
        due_at=None if data.get("ack_due_at") is None else int(data["ack_due_at"]),
        fence=int(data.get("ack_fence", 0)),
        lease_until=int(data.get("ack_lease_until", 0)),
        deliveries={k: Delivery.from_map(v) for k, v in acks.items()},
        pledge=pledge,
        case_id=data.get("case_id"),
    )
