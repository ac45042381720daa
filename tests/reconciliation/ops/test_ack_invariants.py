"""The acknowledgement invariants of the explorer (reconciliation/ops/ack_invariants.py),
each broken on purpose, and the explorer's receiver (reconciliation/ops/explorer/receiver.py)."""

from __future__ import annotations

import json

from reconciliation.acks.addresses import Target
from reconciliation.acks.models import Endpoint, event_id
from reconciliation.ops.ack_invariants import (
    NONE_UNRECORDED,
    ONE_DELIVERY,
    PROCESSED_ONCE,
    Receipt,
    delivery_problems,
    processed_problems,
    unrecorded_problems,
)
from reconciliation.ops.explorer.receiver import Receiver, ReceiverFault

INTENT = "t#k"
RECORDED_ID = event_id(INTENT, "pledge.recorded")
VOIDED_ID = event_id(INTENT, "pledge.voided")
ENDPOINT = Endpoint("E1", "t", "https://crm.example.org/hooks", "whsec_x")
RECORDED_ONLY = Endpoint(
    "E2", "t", "https://erp.example.org/hooks", "whsec_y", events=("pledge.recorded",)
)


def _delivery(status: str, event: str = "pledge.recorded", endpoint: str = "E1") -> dict:
    return {"endpoint_id": endpoint, "event_type": event, "status": status}


def _pledge(status: str = "RECORDED", *, due: bool = False, **acks: dict) -> dict:
    pledge = {"intent_id": INTENT, "tenant": "t", "status": status, "acks": acks}
    if due:
        pledge["ack_due_at"] = 100
    return pledge


def _problems(*pledges: dict, cases=(), drained: bool = False) -> list[str]:
    found = delivery_problems(pledges, [ENDPOINT, RECORDED_ONLY], cases, drained=drained)
    assert all(p.invariant == ONE_DELIVERY for p in found)
    return [p.detail for p in found]


def test_a_recorded_pledge_without_its_delivery_and_not_due_is_reported():
    """Invariant g: recorded, out of acks_due, and no delivery to a subscribed endpoint:
    the acknowledgement is lost. Still due, it is merely not sent yet."""
    assert _problems(_pledge()) == [
        "t#k: E1/pledge.recorded missing and the pledge is not in acks_due",
        "t#k: E2/pledge.recorded missing and the pledge is not in acks_due",
    ]
    assert _problems(_pledge(due=True)) == []
    pending = {"E1/pledge.recorded": _delivery("PENDING")}
    assert _problems(_pledge(due=True, **pending)) == []  # E2 not yet taken: due


def test_every_subscribed_endpoint_and_event_needs_its_delivery():
    """Invariant g: a VOIDED pledge owes pledge.voided to the endpoints subscribed to it
    (not to one subscribed to pledge.recorded alone); a RECORDED one owes no void."""
    delivered = {
        "E1/pledge.recorded": _delivery("DELIVERED"),
        "E2/pledge.recorded": _delivery("DELIVERED", endpoint="E2"),
    }
    assert _problems(_pledge(**delivered)) == []
    assert _problems(_pledge("VOIDED", **delivered)) == [
        "t#k: E1/pledge.voided missing and the pledge is not in acks_due"
    ]
    stray = {**delivered, "E1/pledge.voided": _delivery("DELIVERED", "pledge.voided")}
    assert _problems(_pledge(**stray)) == [
        "t#k: a delivery E1/pledge.voided for an event it never had"
    ]
    assert _problems(_pledge("PENDING", **stray)) == [
        "t#k: a delivery E1/pledge.recorded for an event it never had",
        "t#k: a delivery E1/pledge.voided for an event it never had",
        "t#k: a delivery E2/pledge.recorded for an event it never had",
    ]


def test_a_delivery_given_up_needs_its_case_and_nothing_stays_due_after_the_drain():
    """Invariant g: GAVE_UP counts only with its ACK_UNDELIVERED case; after the drain a
    pledge still due, or a PENDING delivery, is reported."""
    acks = {
        "E1/pledge.recorded": _delivery("GAVE_UP"),
        "E2/pledge.recorded": _delivery("DELIVERED", endpoint="E2"),
    }
    assert _problems(_pledge(**acks)) == ["t#k: E1/pledge.recorded given up without its case"]
    case = {
        "case_type": "ACK_UNDELIVERED",
        "intent_id": INTENT,
        "evidence": {"ack": {"endpoint_id": "E1", "event_type": "pledge.recorded"}},
    }
    assert _problems(_pledge(**acks), cases=[case]) == []
    pending = {**acks, "E1/pledge.recorded": _delivery("PENDING")}
    assert _problems(_pledge(due=True, **pending), cases=[case], drained=True) == [
        "t#k: still due after the drain",
        "t#k: E1/pledge.recorded PENDING after the drain",
    ]


def test_an_event_for_an_unrecorded_intent_is_reported():
    """Invariant h: an event heard for an intent with no pledge, or still PENDING; a
    pledge.voided for a pledge that is only RECORDED."""
    recorded = Receipt(RECORDED_ID, INTENT, "pledge.recorded", True)
    voided = Receipt(VOIDED_ID, INTENT, "pledge.voided", True)
    assert unrecorded_problems([_pledge()], [recorded]) == []
    assert unrecorded_problems([_pledge("VOIDED")], [recorded, voided]) == []
    found = unrecorded_problems([], [recorded]) + unrecorded_problems([_pledge()], [voided])
    assert {p.invariant for p in found} == {NONE_UNRECORDED}
    assert [p.detail for p in found] == [
        f"pledge.recorded {RECORDED_ID} sent for t#k, whose pledge is absent",
        "pledge.voided sent for t#k, whose pledge is RECORDED",
    ]


def test_an_event_processed_twice_or_under_two_ids_is_reported():
    """Invariant i: one processing per webhook-id, one id (its own) per event, and a
    delivery recorded DELIVERED was processed."""
    first = Receipt(RECORDED_ID, INTENT, "pledge.recorded", True)
    again = Receipt(RECORDED_ID, INTENT, "pledge.recorded", False)
    delivered = _pledge(**{"E1/pledge.recorded": _delivery("DELIVERED")})
    assert processed_problems([first, again], [delivered]) == []
    found = processed_problems([first, first], [delivered])
    assert [p.detail for p in found] == [
        f"{RECORDED_ID} processed 2 times",
        "t#k: E1/pledge.recorded recorded DELIVERED, processed 2 times",
    ]
    other = Receipt("msg_attempt2", INTENT, "pledge.recorded", True)
    found = processed_problems([first, other])
    assert {p.invariant for p in found} == {PROCESSED_ONCE}
    assert "carried 2 webhook-ids" in found[0].detail
    found = processed_problems([], [delivered])
    assert [p.detail for p in found] == [
        "t#k: E1/pledge.recorded recorded DELIVERED, processed 0 times"
    ]


# --- the receiver ------------------------------------------------------------------------------

TARGET = Target("http", "127.0.0.1", 9, "/hooks", "127.0.0.1")


def _send(receiver: Receiver, webhook_id: str = RECORDED_ID):
    body = json.dumps(
        {"type": "pledge.recorded", "data": {"intent_id": "k", "tenant": "t"}}
    ).encode()
    return receiver(
        TARGET,
        headers={"webhook-id": webhook_id},
        body=body,
        connect_timeout_s=1,
        read_timeout_s=1,
    )


def test_the_receiver_deduplicates_and_misbehaves_after_processing():
    """A repeat of a webhook-id is a duplicate; refused processes nothing; 500 and a
    timeout process first, then answer 500 or nothing."""
    faults = iter([ReceiverFault.REFUSED, ReceiverFault.ERROR_500, ReceiverFault.TIMEOUT, None])
    receiver = Receiver(lambda label: next(faults))
    refused = _send(receiver)
    assert (refused.code, receiver.receipts) == (None, [])
    assert _send(receiver).code == 500
    timed_out = _send(receiver)
    assert timed_out.code is None and "timeout" in timed_out.error
    assert _send(receiver).ok
    assert receiver.processed == [RECORDED_ID] and receiver.duplicates == 2
    assert receiver.receipts[0] == Receipt(RECORDED_ID, INTENT, "pledge.recorded", True)
