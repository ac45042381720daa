"""Redelivery from the pledge page (docs/webhooks.md): a member of staff makes one
delivery of a pledge's acknowledgement due now, with a reason, as an event in the
pledge's audit stream written in the same transaction.

The change is one conditional UpdateItem on the pledge item, conditioned on what the
page read (the delivery's attempts and status, and the pledge's audit head): the
delivery is ``PENDING`` again, its next attempt now, and the pledge back in ``acks_due``.
It also moves the pledge's fence on (``ack_fence`` + 1), so a dispatcher that read the
pledge before it (one may be sending it right now) cannot record its old deliveries over
this change: its record is refused, and the next pass sends the delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from reconciliation import clock
from reconciliation.acks.models import Delivery, DeliveryStatus
from reconciliation.acks.repository import AckRepository
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.repository import AuditRepository, audit_event_build
from reconciliation.cases.actions import check_reason
from reconciliation.cases.changes import InvalidReason
from reconciliation.cases.policy import STAFF
from reconciliation.cases.vocabulary import ReasonCode
from reconciliation.claims.models import Pledge
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.dynamo.errors import ErrorCode, error_code
from reconciliation.dynamo.items import transact_items, values
from reconciliation.dynamo.tables import ack_shard
from reconciliation.stores import Store, pledge_stream


class RedeliverRefused(Exception):
    """Not done; the message says why, in words the person can act on."""


@dataclass(frozen=True)
class RedeliverSeen:
    """What the page showed of the delivery: the decision is conditioned on it."""

    key: str
    attempts: int
    status: DeliveryStatus
    audit_seq: int


@dataclass(frozen=True)
class RedeliverAsk:
    """Who asks for a redelivery and why. ``bulk_id`` names the bulk resend it is one
    item of (reconciliation/acks/resend.py), in the event's detail, so the audit trail
    ties an endpoint's resends together; empty for a single redelivery."""

    actor: Actor
    reason_code: ReasonCode
    reason_text: str
    bulk_id: str = ""


def ack_redeliver(store: Store, *, intent_id: str, seen: RedeliverSeen, ask: RedeliverAsk) -> None:
    """Make the delivery ``seen.key`` of ``intent_id`` due now, audited; or raise
    :class:`RedeliverRefused` (nothing written)."""
    if ask.actor.role not in STAFF:
        raise RedeliverRefused("Only finance staff and supervisors may redeliver.")
    try:
        reason = check_reason(ask.reason_code, ask.reason_text)
    except InvalidReason as exc:
        raise RedeliverRefused(str(exc)) from exc
    delivery, pledge = _as_seen(store, intent_id, seen)
    now = clock.epoch()
    event = audit_event_build(
        AuditEvent(
            action=AuditAction.ACK_REDELIVERED,
            actor=ask.actor,
            intent_id=intent_id,
            before={"status": str(delivery.status), "attempts": delivery.attempts},
            after={"status": str(DeliveryStatus.PENDING), "next_at": now},
            reason_code=reason.code,
            reason_text=reason.text,
            detail={
                "endpoint": delivery.endpoint_id,
                "event_type": str(delivery.event_type),
                **({"bulk_id": ask.bulk_id} if ask.bulk_id else {}),
            },
        ),
        stream=pledge_stream(intent_id, store.tag),
        seq=pledge.audit_seq + 1,
        prev_hash=pledge.audit_head,
    )
    update = _due_now(store, seen, pledge, head=event["hash"], now=now)
    try:
        store.client.transact_write_items(
            TransactItems=transact_items([AuditRepository(store).put_item(event), update])
        )
    except ClientError as exc:
        if error_code(exc) in (ErrorCode.TRANSACTION_CANCELED, ErrorCode.CONDITION_FAILED):
            raise RedeliverRefused(
                "The delivery changed while redelivering (an attempt or another action): "
                "nothing was changed; look at it again."
            ) from exc
        raise


def _as_seen(store: Store, intent_id: str, seen: RedeliverSeen) -> tuple[Delivery, Pledge]:
    """The delivery and its pledge, read now; refused unless they are as the page saw."""
    state = AckRepository(store).get(intent_id)
    pledge = PledgeRepository(store).get(intent_id, consistent=True)
    delivery = state.deliveries.get(seen.key) if state else None
    if state is None or pledge is None or delivery is None:
        raise RedeliverRefused("This pledge has no such delivery.")
    if (delivery.attempts, str(delivery.status), pledge.audit_seq) != (
        seen.attempts,
        seen.status,
        seen.audit_seq,
    ):
        raise RedeliverRefused(
            "The delivery changed since the page was read (another attempt or action): "
            "look at it again."
        )
    return delivery, pledge


def _due_now(
    store: Store, seen: RedeliverSeen, pledge: Pledge, *, head: str, now: int
) -> dict[str, Any]:
    """The pledge's update: the delivery due now, the fence moved on, the audit head
    advanced; conditioned on the delivery and the audit sequence the page saw."""
    intent_id = pledge.intent_id
    return {
        "Update": {
            "TableName": store.tables.pledges,
            "Key": {"intent_id": {"S": intent_id}},
            "UpdateExpression": (
                "SET #acks.#k.#st = :pending, #acks.#k.next_at = :now, ack_shard = :shard,"
                " ack_due_at = :now, ack_fence = if_not_exists(ack_fence, :zero) + :one,"
                " audit_seq = :next_seq, audit_head = :head"
            ),
            "ConditionExpression": (
                "audit_seq = :seq AND #acks.#k.attempts = :attempts AND #acks.#k.#st = :seen"
            ),
            "ExpressionAttributeNames": {"#acks": "acks", "#k": seen.key, "#st": "status"},
            "ExpressionAttributeValues": values(
                pending=str(DeliveryStatus.PENDING),
                now=now,
                shard=ack_shard(intent_id),
                zero=0,
                one=1,
                next_seq=pledge.audit_seq + 1,
                head=head,
                seq=pledge.audit_seq,
                attempts=seen.attempts,
                seen=seen.status,
            ),
        }
    }
