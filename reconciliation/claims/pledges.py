"""The durable pledge record (``pledges``): created only with ``attribute_not_exists``.

Its key, not the claim's, is what makes a pledge exactly-once beyond the 10-minute
token window and beyond the claim's TTL.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from reconciliation.dynamo.batch import stored_heads
from reconciliation.dynamo.items import from_item, to_item

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

RECORDED = "RECORDED"
VOIDED = "VOIDED"


def intent_id_for(tenant: str, idempotency_key: str) -> str:
    return f"{tenant}#{idempotency_key}"


@dataclass(frozen=True)
class Pledge:
    intent_id: str
    tenant: str
    donor_ref: str
    fund: str
    amount: Decimal
    currency: str
    status: str
    request_token: str
    created_at: str
    ledger_key: str
    audit_seq: int = 1
    audit_head: str = ""
    voided_at: str | None = None

    @property
    def idempotency_key(self) -> str:
        return self.intent_id.split("#", 1)[1]

    def normalised_request(self) -> dict[str, str]:
        return {
            "donor_ref": self.donor_ref,
            "fund": self.fund,
            "amount": f"{self.amount:.2f}",
            "currency": self.currency,
        }

    def api_body(self) -> dict:
        """What the intake API returns: the client's own key, never the tenant prefix."""
        return {
            "intent_id": self.idempotency_key,
            "donor_ref": self.donor_ref,
            "fund": self.fund,
            "amount": f"{self.amount:.2f}",
            "currency": self.currency,
            "status": self.status,
            "created_at": self.created_at,
        }

    def snapshot(self) -> dict:
        return {**self.api_body(), "intent_id": self.intent_id, "ledger_key": self.ledger_key}


def pledge_from_item(item: dict | None) -> Pledge | None:
    data = from_item(item)
    if data is None:
        return None
    data["amount"] = Decimal(str(data["amount"]))
    known = Pledge.__dataclass_fields__
    return Pledge(**{k: v for k, v in data.items() if k in known})


class PledgeRepository:
    def __init__(self, client: DynamoDBClient, table: str):
        self.client = client
        self.table = table

    @staticmethod
    def _key(intent_id: str) -> dict:
        return {"intent_id": {"S": intent_id}}

    def get(self, intent_id: str, *, consistent: bool = True) -> Pledge | None:
        response = self.client.get_item(
            TableName=self.table, Key=self._key(intent_id), ConsistentRead=consistent
        )
        return pledge_from_item(response.get("Item"))

    def heads(self, intent_ids: list[str]) -> dict[str, tuple[int, str]]:
        """``{intent_id: (audit_seq, audit_head)}`` of the pledges that exist: BatchGetItem,
        two attributes each (audit verification compares them with the streams)."""
        return stored_heads(self.client, self.table, "intent_id", intent_ids)

    def put_item(self, pledge: Pledge) -> dict:
        data = {k: getattr(pledge, k) for k in Pledge.__dataclass_fields__}
        return {
            "Put": {
                "TableName": self.table,
                "Item": to_item(data),
                # The durable exactly-once invariant: one pledge per intent, forever.
                "ConditionExpression": "attribute_not_exists(intent_id)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def void_item(self, pledge: Pledge, *, voided_at: str, audit_head: str) -> dict:
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(pledge.intent_id),
                "UpdateExpression": (
                    "SET #st = :voided, voided_at = :at, audit_seq = :next_seq, audit_head = :head"
                ),
                # Only a RECORDED pledge at the audit head we read can be voided once.
                "ConditionExpression": "#st = :recorded AND audit_seq = :seq",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": {
                    ":voided": {"S": VOIDED},
                    ":recorded": {"S": RECORDED},
                    ":at": {"S": voided_at},
                    ":seq": {"N": str(pledge.audit_seq)},
                    ":next_seq": {"N": str(pledge.audit_seq + 1)},
                    ":head": {"S": audit_head},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
