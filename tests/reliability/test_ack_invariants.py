"""The acknowledgements' invariant checker as the reliability run uses it
(tests/reliability/ack_invariants.py: the sink's ``/stats`` translated for the checker of
reconciliation/simulation/ack_invariants.py, and its own rule, none given up) is not vacuous: a
consistent world passes, and each invariant broken on purpose is reported and counted in
the run's figures. Plain data, no engine: part of ``make test``, in well under a second."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal

import pytest

from reconciliation.acks.events import body_bytes, event_payload
from reconciliation.acks.models import AckState, Delivery, DeliveryStatus, Endpoint, event_id
from reconciliation.claims.models import Pledge, PledgeStatus
from reconciliation.simulation.ack_invariants import NONE_UNRECORDED, ONE_DELIVERY, PROCESSED_ONCE
from tests.reliability.ack_invariants import NONE_GIVEN_UP, AckReport, SinkSeen, ack_check

ENDPOINT = Endpoint("E1", "sim", "http://127.0.0.1:9/hooks", "whsec_x")
RECORDED = "pledge.recorded"


def pledge(n: int, *, tenant: str = "sim", voided: bool = False) -> Pledge:
    return Pledge(
        intent_id=f"{tenant}#k-{n}",
        tenant=tenant,
        donor_ref=f"D-{n}",
        fund="GENERAL",
        amount=Decimal("10.00") + n,
        currency="USD",
        status=PledgeStatus.VOIDED if voided else PledgeStatus.RECORDED,
        request_token=f"token-{n}",
        created_at="2026-12-04T10:00:00.000000Z",
        ledger_key="GENERAL#USD#0",
        voided_at="2026-12-04T10:05:00.000000Z" if voided else None,
    )


def delivered(state_pledge: Pledge, *events: str) -> AckState:
    deliveries = {
        f"E1/{e}": Delivery("E1", ENDPOINT.url, e, DeliveryStatus.DELIVERED, attempts=1)
        for e in events
    }
    return AckState(
        intent_id=state_pledge.intent_id,
        tenant=state_pledge.tenant,
        due_at=None,
        fence=1,
        pledge=state_pledge,
        deliveries=deliveries,
    )


def world() -> tuple[list[AckState], SinkSeen]:
    """Three recorded pledges (one voided since), each event processed once; one event
    delivered twice (a lost answer); a pledge of another tenant, sent nothing."""
    states = [
        delivered(pledge(1), RECORDED),
        delivered(pledge(2), RECORDED),
        delivered(pledge(3, voided=True), RECORDED, "pledge.voided"),
        delivered(pledge(4, tenant="other")),
    ]
    sent = [(s, d.event_type) for s in states for d in s.deliveries.values()]
    messages = [event_id(s.intent_id, event_type) for s, event_type in sent]
    events = {
        event_id(s.intent_id, event_type): json.loads(body_bytes(event_payload(s, event_type)))
        for s, event_type in sent
    }
    seen = SinkSeen(
        ids_seen=(*messages, messages[0]),
        processed=tuple(messages),
        events=events,
        duplicates=1,
    )
    return states, seen


def check(states: list[AckState], seen: SinkSeen, cases=()) -> AckReport:
    return ack_check(states, seen, endpoint=ENDPOINT, cases=list(cases))


def words(report: AckReport) -> list[str]:
    return [str(problem) for problem in report.problems]


def test_a_consistent_world_passes():
    """Every recorded pledge's events processed once, one duplicate delivery: no problem."""
    report = check(*world())
    assert words(report) == []
    assert report.figures() == {
        "recorded": 3,
        "events_due": 4,
        "deliveries": 5,
        "processed": 4,
        "duplicates": 1,
        "lost": 0,
        "processed_twice": 0,
        "sent_for_unrecorded": 0,
        "given_up": 0,
        "pending": 0,
    }


def test_an_event_never_processed_is_lost():
    """The receiver never processed pledge 2's event: lost, though its delivery says
    delivered (the receiver's word counts, not the dispatcher's)."""
    states, seen = world()
    gone = event_id("sim#k-2", RECORDED)
    seen = replace(
        seen,
        processed=tuple(m for m in seen.processed if m != gone),
        ids_seen=tuple(m for m in seen.ids_seen if m != gone),
    )
    report = check(states, seen)
    assert report.lost == 1
    assert words(report) == [
        f"{PROCESSED_ONCE}: sim#k-2: E1/{RECORDED} recorded DELIVERED, never processed (lost)"
    ]


def test_an_event_processed_twice_is_reported():
    """The receiver applied one ``webhook-id`` twice (its deduplication failed)."""
    states, seen = world()
    twice = event_id("sim#k-1", RECORDED)
    report = check(states, replace(seen, processed=(*seen.processed, twice)))
    assert report.processed_twice == 1
    assert words(report) == [f"{PROCESSED_ONCE}: {twice} processed 2 times"]


@pytest.mark.parametrize(
    ("intent", "why"),
    [
        ("sim#k-9", "{stray} sent, the event of no stored pledge (no payload kept)"),
        (
            "other#k-4",
            f"{RECORDED} {{stray}} sent for other#k-4, a pledge of tenant other, "
            "to an endpoint of sim",
        ),
    ],
)
def test_an_event_sent_for_an_unrecorded_intent_is_reported(intent, why):
    """The receiver was sent the event of an intent with no recorded pledge (or of
    another tenant's pledge): reported, even though it was never processed."""
    states, seen = world()
    stray = event_id(intent, RECORDED)
    report = check(states, replace(seen, ids_seen=(*seen.ids_seen, stray)))
    assert report.unrecorded == 1
    assert words(report) == [f"{NONE_UNRECORDED}: {why.format(stray=stray)}"]


def test_a_void_sent_for_a_pledge_not_voided_is_reported():
    """The receiver processed ``pledge.voided`` of pledge 1, which is only recorded."""
    states, seen = world()
    void = json.loads(body_bytes(event_payload(states[0], "pledge.voided")))
    stray = event_id("sim#k-1", "pledge.voided")
    seen = replace(
        seen,
        ids_seen=(*seen.ids_seen, stray),
        processed=(*seen.processed, stray),
        events={**seen.events, stray: void},
    )
    report = check(states, seen)
    assert report.unrecorded == 1
    assert words(report) == [
        f"{NONE_UNRECORDED}: pledge.voided sent for sim#k-1, whose pledge is RECORDED"
    ]


def test_a_delivery_given_up_is_reported():
    """Pledge 1's delivery ran out of attempts: a failure in this run even with its
    ACK_UNDELIVERED case (which the explorer allows), and without it, the case missing too."""
    states, seen = world()
    first = states[0]
    gave_up = replace(first.deliveries[f"E1/{RECORDED}"], status=DeliveryStatus.GAVE_UP)
    states[0] = replace(first, deliveries={gave_up.key: gave_up})
    case = {
        "case_type": "ACK_UNDELIVERED",
        "intent_id": "sim#k-1",
        "evidence": {"ack": {"endpoint_id": "E1", "event_type": RECORDED}},
    }
    report = check(states, seen, [case])
    given_up = f"{NONE_GIVEN_UP}: sim#k-1: E1/{RECORDED} given up"
    assert report.given_up == 1 and words(report) == [given_up]
    report = check(states, seen)
    assert report.given_up == 1
    assert words(report) == [
        f"{ONE_DELIVERY}: sim#k-1: E1/{RECORDED} given up without its case",
        given_up,
    ]


def test_a_pledge_still_due_or_waiting_at_rest_is_reported():
    """At rest no pledge is in ``acks_due`` and no delivery is waiting."""
    states, seen = world()
    waiting = replace(states[1].deliveries[f"E1/{RECORDED}"], status=DeliveryStatus.PENDING)
    states[1] = replace(states[1], due_at=1, deliveries={waiting.key: waiting})
    report = check(states, seen)
    assert report.pending == 2
    assert [p.detail for p in report.problems] == [
        "sim#k-2: still in acks_due at rest",
        f"sim#k-2: E1/{RECORDED} PENDING at rest",
    ]


def test_a_voided_pledge_without_its_voided_event_is_lost():
    """Pledge 3 was voided: without ``pledge.voided`` delivered and processed, it is lost."""
    states, seen = world()
    voided = event_id("sim#k-3", "pledge.voided")
    states[2] = replace(
        states[2], deliveries={k: d for k, d in states[2].deliveries.items() if "voided" not in k}
    )
    seen = replace(
        seen,
        processed=tuple(m for m in seen.processed if m != voided),
        ids_seen=tuple(m for m in seen.ids_seen if m != voided),
    )
    report = check(states, seen)
    assert report.lost == 1
    assert [p.detail for p in report.problems] == [
        "sim#k-3: E1/pledge.voided missing and the pledge is not in acks_due",
        "sim#k-3: E1/pledge.voided no delivery recorded, never processed (lost)",
    ]


def test_a_processed_payload_of_another_pledge_is_reported():
    """The id is right but the body is not the pledge's (another amount)."""
    states, seen = world()
    message = event_id("sim#k-1", RECORDED)
    wrong = dict(seen.events[message], data={**seen.events[message]["data"], "amount": "99.00"})
    report = check(states, replace(seen, events={**seen.events, message: wrong}))
    assert words(report) == [
        f"{PROCESSED_ONCE}: sim#k-1: E1/{RECORDED} processed another payload "
        "(amount '99.00', not '11.00')"
    ]
