"""Resending an endpoint's failed deliveries after a receiver's outage (docs/webhooks.md,
"Resend failed deliveries"): a supervisor previews the deliveries of one endpoint that
failed since a time and are still undelivered, then confirms; each is then one
redelivery of its own (reconciliation/acks/redeliver.py · ``ack_redeliver``), audited in
its pledge's stream, with the same ``webhook-id``.

The confirm acts on exactly what the preview read: each item carries the delivery's
attempts and status and the pledge's audit head as the preview saw them, and its write is
conditioned on them. A delivery that moved since (an attempt, or another supervisor's
resend) is reported and left alone, so two supervisors confirming at once resend each
delivery once between them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from reconciliation.acks.models import Delivery, DeliveryStatus, EventType, delivery_key
from reconciliation.acks.redeliver import (
    RedeliverAsk,
    RedeliverRefused,
    RedeliverSeen,
    ack_redeliver,
)
from reconciliation.acks.repository import AckRepository
from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import check_reason
from reconciliation.cases.changes import InvalidReason
from reconciliation.cases.vocabulary import ReasonCode
from reconciliation.codes import Code
from reconciliation.stores import Store

# At most this many deliveries in one preview and confirm (each is a read, then a
# transaction): a larger backlog is resent in rounds, the preview says how many are left.
RESEND_MAX = 200

StoreFor = Callable[[str], Store]  # an intent id's home region


@dataclass(frozen=True)
class ResendItem:
    """One delivery as the preview read it: what its resend is conditioned on."""

    intent_id: str
    seen: RedeliverSeen
    # The delivery as the preview read it, for the page; a confirm carries only ``seen``.
    delivery: Delivery | None = None

    @property
    def client_key(self) -> str:
        return self.intent_id.partition("#")[2]

    @property
    def event(self) -> EventType:
        return EventType.read(self.seen.key.partition("/")[2])


@dataclass(frozen=True)
class ResendPreview:
    items: tuple[ResendItem, ...]  # still undelivered: what a confirm resends
    delivered: int  # failed in the window, delivered since: nothing to resend
    missing: int  # no such delivery on the pledge (a hand-edited log, another table)


class ResendOutcome(Code):
    RESENT = "RESENT", "Due now", "Made due now; the dispatcher sends it within seconds."
    CHANGED = (
        "CHANGED",
        "Changed since the preview",
        "An attempt or another resend moved it on since the preview: not resent.",
    )
    UNANSWERED = (
        "UNANSWERED",
        "Database did not answer",
        "DynamoDB did not answer: not resent; preview again.",
    )


@dataclass(frozen=True)
class ResendResult:
    item: ResendItem
    outcome: ResendOutcome
    message: str = ""


def acks_resend_preview(
    candidates: Iterable[tuple[str, str]], *, endpoint_id: str, store_for: StoreFor
) -> ResendPreview:
    """Of ``candidates`` (intent id, event type: the endpoint's deliveries with a failed
    attempt in the window), those still undelivered, each read consistently."""
    items: list[ResendItem] = []
    delivered = missing = 0
    for intent_id, event_type in candidates:
        key = delivery_key(endpoint_id, event_type)
        state = AckRepository(store_for(intent_id)).get(intent_id)
        delivery = state.deliveries.get(key) if state else None
        if state is None or delivery is None:
            missing += 1
        elif delivery.status == DeliveryStatus.DELIVERED:
            delivered += 1
        else:
            seen = RedeliverSeen(
                key=key,
                attempts=delivery.attempts,
                status=delivery.status,
                audit_seq=state.pledge.audit_seq,
            )
            items.append(ResendItem(intent_id, seen, delivery))
    return ResendPreview(tuple(items), delivered, missing)


def acks_resend(
    items: Iterable[ResendItem],
    *,
    store_for: StoreFor,
    actor: Actor,
    reason_code: ReasonCode,
    reason_text: str,
    bulk_id: str,
) -> list[ResendResult]:
    """Resend each of ``items`` as previewed, each its own audited change; the outcome
    per item. A refusal of the whole (role, reason) raises :class:`RedeliverRefused`
    before anything is written."""
    if actor.role != Role.SUPERVISOR:
        raise RedeliverRefused("Only supervisors may resend an endpoint's deliveries at once.")
    try:
        check_reason(reason_code, reason_text)
    except InvalidReason as exc:
        raise RedeliverRefused(str(exc)) from exc
    ask = RedeliverAsk(actor, reason_code, reason_text, bulk_id)
    results = []
    for item in items:
        try:
            ack_redeliver(
                store_for(item.intent_id), intent_id=item.intent_id, seen=item.seen, ask=ask
            )
        except RedeliverRefused as exc:
            results.append(ResendResult(item, ResendOutcome.CHANGED, str(exc)))
        except (BotoCoreError, ClientError):
            results.append(ResendResult(item, ResendOutcome.UNANSWERED))
        else:
            results.append(ResendResult(item, ResendOutcome.RESENT))
    return results
