"""An acknowledgement the dispatcher gives up on becomes an ACK_UNDELIVERED case
(docs/webhooks.md): one case per pledge, endpoint and event type, however many
dispatchers give up on it. The retry schedule is shortened here, and time travels."""

from __future__ import annotations

import threading

import pytest

from reconciliation import clock
from reconciliation.acks import schedule
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import DeliveryStatus, event_id
from reconciliation.acks.repository import AckRepository
from reconciliation.acks.undelivered import ack_case_id, ack_undelivered_open
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, CaseType, Queue
from reconciliation.stores import first_store
from tests.conftest import pledge_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_attempts(monkeypatch):
    """The schedule cut to two attempts, 30 s apart."""
    monkeypatch.setattr(schedule, "RETRY_DELAYS_S", (30,))
    monkeypatch.setattr(schedule, "MAX_ATTEMPTS", 2)


def endpoints():
    from dashboard.management.commands.dispatch_acks import endpoints_for

    listed = endpoints_for("acme")
    return lambda tenant: listed if tenant == "acme" else []


def ack_cases(store, intent_id: str = "acme#u-1") -> list:
    repository = CaseRepository(store)
    cases = repository.get_many(repository.ids_for_intent(intent_id))
    return [c for c in cases if c.case_type == CaseType.ACK_UNDELIVERED]


def test_the_last_failed_attempt_opens_one_case_even_with_two_dispatchers(
    ddb, api, acme_sink, two_attempts
):
    """A sink answering 500 to everything: the first attempt is retried, the last one is
    given up and opens an ACK_UNDELIVERED case in its queue with the endpoint, event type,
    webhook-id, attempts and last answer as evidence. Two dispatchers racing on the last
    attempt, and the give-up opened again, still make one case."""
    sink = acme_sink("--misbehave", "500")
    assert api.post("u-1", pledge_body()).status_code == 201
    store = first_store()
    endpoints_for = endpoints()

    first = acks_dispatch_once(store, endpoints_for=endpoints_for)
    assert (first.failed, first.gave_up) == (1, 0)
    assert ack_cases(store) == []

    reports = []
    start = threading.Barrier(2)

    def dispatcher() -> None:
        start.wait()
        reports.append(acks_dispatch_once(store, endpoints_for=endpoints_for))

    with clock.travel(60):
        threads = [threading.Thread(target=dispatcher) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sum(r.gave_up for r in reports) == 1
    assert sink.stats()["deliveries"] == 2

    state = AckRepository(store).get("acme#u-1")
    assert state is not None and not state.due
    [delivery] = state.deliveries.values()
    assert (delivery.status, delivery.attempts, delivery.last_code) == (
        DeliveryStatus.GAVE_UP,
        2,
        500,
    )
    [case] = ack_cases(store)
    assert case.case_id == ack_case_id("acme#u-1", delivery.endpoint_id, "pledge.recorded")
    assert (case.state, case.queue, case.intent_id) == (
        CaseState.OPEN,
        Queue.ACK_UNDELIVERED,
        "acme#u-1",
    )
    assert case.evidence.ack == {
        "endpoint_id": delivery.endpoint_id,
        "url": sink.url,
        "event_type": "pledge.recorded",
        "webhook_id": event_id("acme#u-1", "pledge.recorded"),
        "attempts": 2,
        "last_code": 500,
        "last_error": "",
        "last_at": delivery.last_at,
    }

    # The same give-up seen again (a successor after a lost lease, two at once): no-op.
    results: list[tuple[str, bool]] = []

    def reopen() -> None:
        start.wait()
        results.append(ack_undelivered_open(store, state, delivery))

    threads = [threading.Thread(target=reopen) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [(case.case_id, False), (case.case_id, False)]
    assert [c.case_id for c in ack_cases(store)] == [case.case_id]
    assert CaseRepository(store).counts()[Queue.ACK_UNDELIVERED] == 1
