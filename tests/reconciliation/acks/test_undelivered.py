"""An acknowledgement the dispatcher gives up on becomes an ACK_UNDELIVERED case
(docs/webhooks.md): one case per pledge, endpoint and event type, however many
dispatchers give up on it. The retry schedule is shortened here, and time travels."""

from __future__ import annotations

import threading

import pytest

from reconciliation import clock
from reconciliation.acks import schedule
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import (
    AttemptResult,
    DeliveryStatus,
    Endpoint,
    event_id,
    secret_new,
)
from reconciliation.acks.repository import AckRepository
from reconciliation.acks.undelivered import ack_case_id, ack_undelivered_open
from reconciliation.actors import Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseChanged, CaseError
from reconciliation.cases.policy import allowed_actions
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, CaseType, Disposition, Queue
from reconciliation.casework.dispositions import case_assign, case_dispose
from tests.conftest import pledge_body, staff_actor
from tests.helpers import AS_SYSTEM, audit_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_attempts(monkeypatch):
    """The schedule cut to two attempts, 30 s apart."""
    monkeypatch.setattr(schedule, "RETRY_DELAYS_S", (30,))
    monkeypatch.setattr(schedule, "MAX_ATTEMPTS", 2)


def endpoints():
    from dashboard.tenancy.management.commands.dispatch_acks import endpoints_for

    listed = endpoints_for("acme")
    return lambda tenant: listed if tenant == "acme" else []


def ack_cases(store, intent_id: str = "acme#u-1") -> list:
    repository = CaseRepository(store)
    cases = repository.get_many(repository.ids_for_intent(intent_id))
    return [c for c in cases if c.case_type == CaseType.ACK_UNDELIVERED]


@pytest.mark.dynamodb_local_only  # a race: moto's in-process backend is not thread-safe
def test_the_last_failed_attempt_opens_one_case_even_with_two_dispatchers(
    ddb, api, acme_sink, two_attempts
):
    """A sink answering 500 to everything: the first attempt is retried, the last one is
    given up and opens an ACK_UNDELIVERED case in its queue with the endpoint, event type,
    webhook-id, attempts and last answer as evidence. Two dispatchers racing on the last
    attempt, and the give-up opened again, still make one case."""
    sink = acme_sink("--misbehave", "500")
    assert api.post("u-1", pledge_body()).status_code == 201
    store = AS_SYSTEM.store
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


# --- dispositions: Redeliver and Close without delivery --------------------------------

WHY = {"reason_code": "TRANSIENT_FAILURE", "reason_text": "The tenant fixed its receiver."}


class Receiver:
    """An endpoint that answers ``codes`` in turn (the sender the dispatcher calls)."""

    def __init__(self, *codes: int):
        self.codes = list(codes)
        self.sent: list[str] = []
        self.endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())

    def send(self, target, *, headers, body, **timeouts) -> AttemptResult:
        self.sent.append(headers["webhook-id"])
        return AttemptResult(self.codes.pop(0) if self.codes else 200)

    def dispatch(self, store):
        return acks_dispatch_once(
            store,
            endpoints_for=lambda tenant: [self.endpoint],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=self.send,
        )


def given_up(api, key: str, receiver: Receiver):
    """A pledge whose acknowledgement the dispatcher gave up on; its case."""
    assert api.post(key, pledge_body()).status_code == 201
    store = AS_SYSTEM.store
    receiver.dispatch(store)
    with clock.travel(60):
        assert receiver.dispatch(store).gave_up == 1
    [case] = ack_cases(store, f"acme#{key}")
    return store, case


def test_redeliver_sends_it_again_with_fresh_attempts_and_keeps_the_case_open(
    ddb, api, two_attempts
):
    """Redeliver puts the pledge back in ``acks_due``, the delivery PENDING with fresh
    attempts, in one transaction with the case's audited disposition (reason code and
    text); the next dispatch delivers it with the same webhook-id. The case stays open
    until someone closes it; a second Redeliver on a delivery no longer given up is
    refused and writes nothing."""
    receiver = Receiver(500, 500)
    store, case = given_up(api, "u-2", receiver)
    staff = StaffAction(actor=staff_actor("ada"), seen_version=case.version, **WHY)

    result = case_dispose(
        case_id=case.case_id, disposition=Disposition.REDELIVER, staff=staff, store=store
    )
    assert result.case.state == CaseState.OPEN and result.case.version == case.version + 1
    state = AckRepository(store).get("acme#u-2")
    assert state is not None and state.due
    delivery = state.deliveries["E1/pledge.recorded"]
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)
    [event] = [
        e
        for e in audit_events(ddb, f"CASE#{case.case_id}")
        if e.get("disposition") == Disposition.REDELIVER
    ]
    assert (event["reason_code"], event["reason_text"], event["actor"]["username"]) == (
        "TRANSIENT_FAILURE",
        WHY["reason_text"],
        "ada",
    )

    again = StaffAction(actor=staff_actor("ada"), seen_version=result.case.version, **WHY)
    with pytest.raises(CaseError, match="not given up"):
        case_dispose(
            case_id=case.case_id, disposition=Disposition.REDELIVER, staff=again, store=store
        )

    with clock.travel(5):
        assert receiver.dispatch(store).delivered == 1
    assert receiver.sent == [event_id("acme#u-2", "pledge.recorded")] * 3
    settled = AckRepository(store).get("acme#u-2")
    assert settled is not None and not settled.due
    assert settled.deliveries["E1/pledge.recorded"].status == DeliveryStatus.DELIVERED
    current = CaseRepository(store).get(case.case_id)
    assert current is not None and current.state == CaseState.OPEN


def test_redeliver_on_a_stale_version_is_refused_and_writes_nothing(ddb, api, two_attempts):
    """Someone changed the case after the page was read (here: took it): the Redeliver
    sent with the old version is refused naming the change; the delivery stays given up."""
    store, case = given_up(api, "u-3", Receiver(500, 500))
    case_assign(
        case_id=case.case_id,
        staff=StaffAction(actor=staff_actor("bea"), seen_version=case.version),
        store=store,
    )
    stale = StaffAction(actor=staff_actor("ada"), seen_version=case.version, **WHY)
    with pytest.raises(CaseChanged):
        case_dispose(
            case_id=case.case_id, disposition=Disposition.REDELIVER, staff=stale, store=store
        )
    state = AckRepository(store).get("acme#u-3")
    assert state is not None and not state.due
    assert state.deliveries["E1/pledge.recorded"].status == DeliveryStatus.GAVE_UP


def test_close_without_delivery_resolves_the_case_audited_and_sends_nothing(ddb, api, two_attempts):
    """Close without delivery resolves the case with its reason; the pledge stays out of
    ``acks_due``; a stale version is refused; it is not offered to auditors."""
    receiver = Receiver(500, 500)
    store, case = given_up(api, "u-4", receiver)
    assert allowed_actions(CaseType.ACK_UNDELIVERED, CaseState.OPEN, staff_actor().role) == [
        Disposition.REDELIVER,
        Disposition.ACK_CLOSED,
        Disposition.ESCALATE,
    ]
    assert allowed_actions(CaseType.ACK_UNDELIVERED, CaseState.OPEN, Role.AUDITOR) == []
    why = {"reason_code": "OTHER", "reason_text": "The tenant removed this endpoint for good."}
    with pytest.raises(CaseChanged):
        case_dispose(
            case_id=case.case_id,
            disposition=Disposition.ACK_CLOSED,
            staff=StaffAction(actor=staff_actor("ada"), seen_version=case.version - 1, **why),
            store=store,
        )
    result = case_dispose(
        case_id=case.case_id,
        disposition=Disposition.ACK_CLOSED,
        staff=StaffAction(actor=staff_actor("ada"), seen_version=case.version, **why),
        store=store,
    )
    assert result.case.state == CaseState.RESOLVED
    assert result.case.resolution is not None
    assert result.case.resolution.disposition == Disposition.ACK_CLOSED
    [event] = [
        e
        for e in audit_events(ddb, f"CASE#{case.case_id}")
        if e.get("disposition") == Disposition.ACK_CLOSED
    ]
    assert (event["reason_code"], event["reason_text"]) == ("OTHER", why["reason_text"])
    assert CaseRepository(store).counts()[Queue.ACK_UNDELIVERED] == 0
    with clock.travel(3600):
        assert receiver.dispatch(store).leased == 0
    assert len(receiver.sent) == 2
