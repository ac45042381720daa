"""The acknowledgement invariants (reconciliation/simulation/ack_invariants.py), each broken on
purpose, and the explorer's receiver (reconciliation/simulation/explorer/receiver.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal

from reconciliation.acks.addresses import Target
from reconciliation.acks.models import AckState, Delivery, Endpoint, event_id
from reconciliation.claims.models import Pledge, PledgeStatus
from reconciliation.simulation.ack_invariants import (
    NONE_UNRECORDED,
    ONE_DELIVERY,
    PROCESSED_ONCE,
    AckFault,
    AckProblem,
    Receipt,
    ack_problems,
    delivery_problems,
    processed_problems,
    rest_problems,
    unrecorded_problems,
)
from reconciliation.simulation.explorer.receiver import Receiver, ReceiverFault

INTENT = "t#k"
RECORDED_ID = event_id(INTENT, "pledge.recorded")
VOIDED_ID = event_id(INTENT, "pledge.voided")
ENDPOINT = Endpoint("E1", "t", "https://crm.example.org/hooks", "whsec_x")
RECORDED_ONLY = Endpoint(
    "E2", "t", "https://erp.example.org/hooks", "whsec_y", events=("pledge.recorded",)
)


def _delivery(status: str, event: str = "pledge.recorded", endpoint: str = "E1") -> Delivery:
    return Delivery(endpoint, "https://example.org/hooks", event, status)


def _pledge(status: str = "RECORDED", *, due: bool = False, **acks: Delivery) -> AckState:
    """The pledge ``t#k`` as stored (``status`` as read: an unknown one stays a string)."""
    pledge = Pledge(
        intent_id=INTENT,
        tenant="t",
        donor_ref="D-1",
        fund="GENERAL",
        amount=Decimal("25.00"),
        currency="USD",
        status=PledgeStatus.read(status),
        request_token="token-1",
        created_at="2026-12-04T10:00:00.000000Z",
        ledger_key="GENERAL#USD#0",
    )
    return AckState(INTENT, "t", 100 if due else None, 1, pledge, deliveries=acks)


def _receipt(event: str = "pledge.recorded", processed: bool = True, **fields: str) -> Receipt:
    """What the receiver heard of ``t#k``'s ``event``: its own id and the pledge's fields."""
    payload = {"amount": "25.00", "currency": "USD", **fields}
    return Receipt(event_id(INTENT, event), INTENT, event, processed, **payload)


def _problems(*pledges: AckState, cases=()) -> list[str]:
    found = delivery_problems(pledges, [ENDPOINT, RECORDED_ONLY], cases)
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
    waiting = _problems(_pledge(**pending))
    assert waiting[0] == "t#k: E1/pledge.recorded PENDING and the pledge is not in acks_due"


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
    """Invariant g: GAVE_UP counts only with its ACK_UNDELIVERED case; at rest (after the
    drain) a pledge still due, and its PENDING delivery, are reported."""
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
    assert rest_problems([_pledge(**acks)], [ENDPOINT, RECORDED_ONLY]) == []
    pending = _pledge(due=True, **{**acks, "E1/pledge.recorded": _delivery("PENDING")})
    assert _problems(pending, cases=[case]) == []  # due: not yet settled
    found = rest_problems([pending], [ENDPOINT, RECORDED_ONLY])
    assert [(p.invariant, p.fault) for p in found] == [
        (ONE_DELIVERY, AckFault.STILL_DUE),
        (ONE_DELIVERY, AckFault.WAITING),
    ]
    assert [p.detail for p in found] == [
        "t#k: still in acks_due at rest",
        "t#k: E1/pledge.recorded PENDING at rest",
    ]
    nothing_taken = rest_problems([_pledge(due=True)], [RECORDED_ONLY])
    assert [p.detail for p in nothing_taken] == [
        "t#k: still in acks_due at rest",
        "t#k: E2/pledge.recorded missing at rest",
    ]


def _unrecorded(pledges: list[AckState], *receipts: Receipt, endpoint=ENDPOINT) -> list[str]:
    found = unrecorded_problems(pledges, receipts, endpoint=endpoint)
    assert {(p.invariant, p.fault) for p in found} <= {(NONE_UNRECORDED, AckFault.UNRECORDED)}
    return [p.detail for p in found]


def test_an_event_for_an_unrecorded_intent_is_reported():
    """Invariant h: an event heard for an intent with no pledge, or still PENDING; a
    pledge.voided for a pledge that is only RECORDED."""
    recorded = _receipt()
    voided = _receipt("pledge.voided")
    assert _unrecorded([_pledge()], recorded) == []
    assert _unrecorded([_pledge("VOIDED")], recorded, voided) == []
    assert _unrecorded([], recorded) + _unrecorded([_pledge()], voided) == [
        f"pledge.recorded {RECORDED_ID} sent for t#k, whose pledge is absent",
        "pledge.voided sent for t#k, whose pledge is RECORDED",
    ]
    assert _unrecorded([_pledge("PENDING")], recorded) == [
        f"pledge.recorded {RECORDED_ID} sent for t#k, whose pledge is PENDING"
    ]


def test_an_event_the_endpoint_is_not_owed_is_reported():
    """Invariant h: another tenant's pledge's event, an event the endpoint is not
    subscribed to, and an id the receiver kept no payload of that no pledge's event has
    were all heard by a receiver they were not owed to."""
    other_tenant = Endpoint("E3", "u", "https://u.example.org/hooks", "whsec_z")
    assert _unrecorded([_pledge()], _receipt(), endpoint=other_tenant) == [
        f"pledge.recorded {RECORDED_ID} sent for t#k, a pledge of tenant t, to an endpoint of u"
    ]
    voided = _receipt("pledge.voided")
    assert _unrecorded([_pledge("VOIDED")], voided, endpoint=RECORDED_ONLY) == [
        f"pledge.voided {VOIDED_ID} sent for t#k to E2, which is not subscribed to it"
    ]
    unknown = Receipt("msg_stray", "", "", False)
    assert _unrecorded([_pledge()], unknown) == [
        "msg_stray sent, the event of no stored pledge (no payload kept)"
    ]


def _processed(pledges: list[AckState], *receipts: Receipt) -> list[AckProblem]:
    found = processed_problems(pledges, receipts, endpoint=ENDPOINT)
    assert {p.invariant for p in found} <= {PROCESSED_ONCE}
    return found


def test_an_event_processed_twice_or_under_two_ids_is_reported():
    """Invariant i: one processing per webhook-id, one id (its own) per event, and a
    delivery recorded DELIVERED was processed."""
    first = _receipt()
    again = _receipt(processed=False)
    delivered = _pledge(**{"E1/pledge.recorded": _delivery("DELIVERED")})
    assert _processed([delivered], first, again) == []
    found = _processed([delivered], first, first)
    assert [(p.fault, p.detail) for p in found] == [
        (AckFault.PROCESSED_TWICE, f"{RECORDED_ID} processed 2 times")
    ]
    other = Receipt("msg_attempt2", INTENT, "pledge.recorded", True)
    found = _processed([], first, other)
    assert [p.fault for p in found] == [AckFault.OTHER_ID]
    assert "carried 2 webhook-ids" in found[0].detail
    # Processed under another id alone: that id is the problem, the event is not lost.
    assert [p.fault for p in _processed([delivered], other)] == [AckFault.OTHER_ID]
    found = _processed([delivered])
    assert [(p.fault, p.detail) for p in found] == [
        (AckFault.LOST, "t#k: E1/pledge.recorded recorded DELIVERED, never processed (lost)")
    ]


def test_an_event_owed_and_not_given_up_is_lost_unless_processed():
    """Invariant i at rest: an owed event waiting or with no delivery and never processed
    is lost; one given up (its case is invariant g's) need not have been processed."""
    voided = _pledge(
        "VOIDED",
        **{
            "E1/pledge.recorded": _delivery("GAVE_UP"),
            "E1/pledge.voided": _delivery("PENDING", "pledge.voided"),
        },
    )
    assert [p.detail for p in _processed([voided])] == [
        "t#k: E1/pledge.voided recorded PENDING, never processed (lost)"
    ]
    assert _processed([voided], _receipt("pledge.voided")) == []
    assert [p.detail for p in _processed([_pledge("VOIDED")], _receipt())] == [
        "t#k: E1/pledge.voided no delivery recorded, never processed (lost)"
    ]


def test_a_processed_payload_of_another_pledge_is_reported():
    """Invariant i: the id is the pledge's event's, but what was processed carries
    another amount, or is another event."""
    delivered = _pledge(**{"E1/pledge.recorded": _delivery("DELIVERED")})
    found = _processed([delivered], _receipt(amount="99.00"))
    assert [(p.fault, p.detail) for p in found] == [
        (
            AckFault.OTHER_PAYLOAD,
            "t#k: E1/pledge.recorded processed another payload (amount '99.00', not '25.00')",
        )
    ]
    swapped = Receipt(RECORDED_ID, INTENT, "pledge.voided", True, "25.00", "USD")
    found = _processed([delivered], swapped)
    assert [p.fault for p in found] == [AckFault.OTHER_ID, AckFault.OTHER_PAYLOAD]
    assert found[1].detail.endswith("(type 'pledge.voided', not 'pledge.recorded')")


def test_every_rule_at_rest_together():
    """ack_problems is g, g at rest, h and i over one endpoint: a settled pledge whose
    event was processed once passes; a pledge still due and an unowed void do not."""
    delivered = _pledge(**{"E1/pledge.recorded": _delivery("DELIVERED")})
    assert (
        ack_problems([delivered], [_receipt(), _receipt(processed=False)], endpoint=ENDPOINT) == []
    )
    due = _pledge(due=True, **{"E1/pledge.recorded": _delivery("PENDING")})
    found = ack_problems([due], [_receipt("pledge.voided")], endpoint=ENDPOINT)
    assert [p.fault for p in found] == [
        AckFault.STILL_DUE,
        AckFault.WAITING,
        AckFault.UNRECORDED,
        AckFault.LOST,
    ]


def test_another_tenants_pledges_owe_the_endpoint_nothing_at_rest():
    """ack_problems over every tenant's pledges, as the reliability run reads them: another
    tenant's pledge delivered to its own endpoint, or still due to one that fails, is
    that endpoint's business, not ``ENDPOINT``'s; the same pledge of ``ENDPOINT``'s own
    tenant is reported."""
    delivered = _pledge(**{"E1/pledge.recorded": _delivery("DELIVERED")})
    theirs = {"E9/pledge.recorded": _delivery("DELIVERED", endpoint="E9")}
    waiting = {"E9/pledge.recorded": _delivery("PENDING", endpoint="E9")}
    others = [
        replace(_pledge(**theirs), intent_id="u#k", tenant="u"),
        replace(_pledge(due=True, **waiting), intent_id="u#k2", tenant="u"),
    ]
    assert ack_problems([delivered, *others], [_receipt()], endpoint=ENDPOINT) == []
    own = [replace(other, intent_id=f"t#{n}", tenant="t") for n, other in enumerate(others)]
    found = ack_problems([delivered, *own], [_receipt()], endpoint=ENDPOINT)
    assert {AckFault.STRAY, AckFault.STILL_DUE} <= {p.fault for p in found}


# --- the receiver ------------------------------------------------------------------------------

TARGET = Target("http", "127.0.0.1", 9, "/hooks", "127.0.0.1")


def _send(receiver: Receiver, webhook_id: str = RECORDED_ID):
    body = json.dumps(
        {
            "type": "pledge.recorded",
            "data": {"intent_id": "k", "tenant": "t", "amount": "25.00", "currency": "USD"},
        }
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
    assert receiver.receipts[0] == Receipt(
        RECORDED_ID, INTENT, "pledge.recorded", True, amount="25.00", currency="USD"
    )
