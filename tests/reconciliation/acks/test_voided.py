"""``pledge.voided``: the void's own write makes the event due (the override's
transaction carries ``PledgeRepository.void_item``), with an id of its own; a void that
lands while a dispatcher holds the lease is never erased by that dispatcher's record."""

from __future__ import annotations

import json

import pytest

from reconciliation import clock
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult, DeliveryStatus, Endpoint, event_id, secret_new
from reconciliation.acks.repository import AckRepository
from reconciliation.claims.pledges import PledgeRepository
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM

pytestmark = pytest.mark.django_db

ENDPOINT = Endpoint(
    "E1",
    "acme",
    "https://crm.example.org/hooks",
    secret_new(),
    events=("pledge.recorded", "pledge.voided"),
)


def void(intent_id: str) -> None:
    """The pledge's part of the VOID_PLEDGE approval's transaction."""
    store = AS_SYSTEM.store
    pledge = PledgeRepository(store).get(intent_id)
    assert pledge is not None
    item = PledgeRepository(store).void_item(
        pledge, voided_at=clock.iso(clock.now()), audit_head="h" * 64
    )
    store.client.transact_write_items(TransactItems=[item])  # type: ignore[list-item]


class Receiver:
    def __init__(self, during=None):
        self.seen: list[tuple[str, dict]] = []
        self.during = during

    def __call__(self, target, *, headers, body, **kwargs):
        self.seen.append((headers["webhook-id"], json.loads(body)))
        if self.during:
            self.during()
            self.during = None
        return AttemptResult(200)


def dispatch(receiver: Receiver):
    return acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda t: [ENDPOINT],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=receiver,
    )


def test_a_void_makes_pledge_voided_due_with_its_own_id(ddb, api):
    """Recorded and acknowledged, then voided: the void puts the pledge back in
    ``acks_due``; the next pass sends ``pledge.voided`` (its own stable id, with the
    time of the void) and does not send ``pledge.recorded`` again."""
    assert api.post("v-1", pledge_body()).status_code == 201
    receiver = Receiver()
    assert dispatch(receiver).settled == 1
    assert AckRepository(AS_SYSTEM.store).get("acme#v-1").due is False  # type: ignore[union-attr]

    void("acme#v-1")
    state = AckRepository(AS_SYSTEM.store).get("acme#v-1")
    assert state is not None and state.due
    report = dispatch(receiver)
    assert (report.delivered, report.settled) == (1, 1)
    recorded, voided = (
        event_id("acme#v-1", "pledge.recorded"),
        event_id("acme#v-1", "pledge.voided"),
    )
    assert [m for m, _ in receiver.seen] == [recorded, voided]
    body = receiver.seen[1][1]
    assert body["type"] == "pledge.voided" and body["data"]["voided_at"]
    settled = AckRepository(AS_SYSTEM.store).get("acme#v-1")
    assert settled is not None and not settled.due
    assert {k: d.status for k, d in settled.deliveries.items()} == {
        "E1/pledge.recorded": DeliveryStatus.DELIVERED,
        "E1/pledge.voided": DeliveryStatus.DELIVERED,
    }


def test_a_void_during_a_send_is_not_erased_by_the_record(ddb, api, settings):
    """The void lands while the dispatcher sends ``pledge.recorded``: its record is
    refused (the pledge changed), so the void's due fact stands; after the lease, the
    next pass sends ``pledge.recorded`` again (same id: at-least-once) and ``pledge.voided``."""
    assert api.post("v-2", pledge_body()).status_code == 201
    receiver = Receiver(during=lambda: void("acme#v-2"))
    assert dispatch(receiver).lease_lost == 1
    state = AckRepository(AS_SYSTEM.store).get("acme#v-2")
    assert state is not None and state.due and state.deliveries == {}

    with clock.travel(settings.ACK_LEASE_S + 1):
        report = dispatch(receiver)
    assert (report.delivered, report.settled) == (2, 1)
    recorded, voided = (
        event_id("acme#v-2", "pledge.recorded"),
        event_id("acme#v-2", "pledge.voided"),
    )
    assert [m for m, _ in receiver.seen] == [recorded, recorded, voided]


def test_an_approved_void_pledge_override_makes_both_events_due(ddb, settings):
    """Through the real path: a pledge recorded by a commit whose answer was lost (a
    case), then a VOID_PLEDGE approved on the case: one pass sends ``pledge.recorded``
    and ``pledge.voided``, each under its own stable id."""
    from tests.helpers import pledges
    from tests.reconciliation.factories import ambiguous_case, void_approved

    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("void-3")
    void_approved(case)
    [pledge] = pledges(ddb)
    assert pledge["status"] == "VOIDED"
    intent_id = pledge["intent_id"]
    endpoint = Endpoint("E1", pledge["tenant"], "https://crm.example.org/hooks", secret_new())
    receiver = Receiver()
    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda t: [endpoint],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=receiver,
    )
    assert (report.delivered, report.settled) == (2, 1)
    assert sorted(m for m, _ in receiver.seen) == sorted(
        [event_id(intent_id, "pledge.recorded"), event_id(intent_id, "pledge.voided")]
    )
