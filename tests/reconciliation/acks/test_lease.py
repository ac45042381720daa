"""The dispatcher's lease and fence on a pledge's deliveries, and the dispatch-time
address check, on the engines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciliation import clock
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import (
    AttemptResult,
    Delivery,
    DeliveryStatus,
    Endpoint,
    event_id,
    secret_new,
)
from reconciliation.acks.repository import AckRepository, LeaseLost
from reconciliation.dynamo import capacity
from reconciliation.stores import first_store
from tests.conftest import pledge_body

pytestmark = pytest.mark.django_db


def test_a_dispatcher_whose_lease_was_taken_over_records_nothing(ddb, api):
    """A's lease runs out mid-send and B takes the pledge: B's fence is newer, so A's
    record is refused (LeaseLost) and B's stands; while B's lease lives, A cannot lease."""
    assert api.post("f-1", pledge_body()).status_code == 201
    repository = AckRepository(first_store())
    state = repository.get("acme#f-1")
    assert state is not None and state.due and state.fence == 0
    fence_a = repository.lease(state, now=clock.epoch(), lease_s=60)
    with pytest.raises(LeaseLost):
        repository.lease(state, now=clock.epoch(), lease_s=60)  # A's lease is live

    later = clock.epoch() + 61
    seen = repository.get("acme#f-1")
    assert seen is not None
    fence_b = repository.lease(seen, now=later, lease_s=60)
    assert fence_b == fence_a + 1
    delivered = Delivery("E1", "https://x.example/", status=DeliveryStatus.DELIVERED, attempts=1)
    done = {delivered.key: delivered}
    with pytest.raises(LeaseLost):
        repository.record(
            "acme#f-1", fence=fence_a, status="RECORDED", deliveries=done, next_due=None
        )
    repository.record("acme#f-1", fence=fence_b, status="RECORDED", deliveries=done, next_due=None)
    settled = repository.get("acme#f-1")
    assert settled is not None and not settled.due
    assert settled.deliveries["E1/pledge.recorded"].status == DeliveryStatus.DELIVERED


def test_an_endpoint_now_resolving_to_a_private_address_is_not_sent_to(ddb, api, settings):
    """At dispatch the host is resolved again; a private answer (DNS rebinding) is refused
    before any connection: the attempt is recorded as refused and retried later."""
    settings.WEBHOOK_ALLOW_LOOPBACK = False
    assert api.post("r-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E9", "acme", "https://crm.example.org/hooks", secret_new())

    def never(*args, **kwargs):
        raise AssertionError("no connection may be made to a refused address")

    report = acks_dispatch_once(
        first_store(),
        endpoints_for=lambda tenant: [endpoint],
        resolve=lambda host, port: ["10.0.0.5"],
        sender=never,
    )
    assert (report.delivered, report.failed) == (0, 1)
    state = AckRepository(first_store()).get("acme#r-1")
    assert state is not None and state.due
    delivery = state.deliveries["E9/pledge.recorded"]
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert "private address" in delivery.last_error


def test_a_pledge_of_a_tenant_without_endpoints_is_settled_quietly(ddb, api):
    """No endpoint subscribed: the pledge leaves ``acks_due`` with no delivery."""
    assert api.post("n-1", pledge_body()).status_code == 201
    report = acks_dispatch_once(first_store(), endpoints_for=lambda tenant: [])
    assert (report.settled, report.delivered) == (1, 0)
    state = AckRepository(first_store()).get("acme#n-1")
    assert state is not None and not state.due and state.deliveries == {}


def test_a_disabled_endpoint_spends_no_attempt_and_is_looked_at_later(ddb, api):
    """A delivery to a disabled endpoint is not sent and spends no attempt; the pledge
    stays due, an hour later, so it is not leased on every pass meanwhile; enabled
    again, the endpoint gets the event."""
    assert api.post("d-1", pledge_body()).status_code == 201
    disabled = Endpoint("E3", "acme", "https://crm.example.org/hooks", secret_new(), enabled=False)

    def never(*args, **kwargs):
        raise AssertionError("a disabled endpoint is never sent to")

    paused = acks_dispatch_once(first_store(), endpoints_for=lambda t: [disabled], sender=never)
    assert (paused.leased, paused.failed, paused.delivered, paused.settled) == (1, 0, 0, 0)
    state = AckRepository(first_store()).get("acme#d-1")
    assert state is not None and state.due
    delivery = state.deliveries["E3/pledge.recorded"]
    assert (delivery.attempts, delivery.status) == (0, DeliveryStatus.PENDING)
    assert delivery.next_at >= clock.epoch() + 3600 - 1 and state.due_at == delivery.next_at
    assert acks_dispatch_once(first_store(), endpoints_for=lambda t: [disabled]).leased == 0

    enabled = replace(disabled, enabled=True)
    sent: list[str] = []

    def answer(target, *, headers, **kwargs):
        sent.append(headers["webhook-id"])
        return AttemptResult(204)

    with clock.travel(3601):
        report = acks_dispatch_once(
            first_store(),
            endpoints_for=lambda t: [enabled],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=answer,
        )
    assert (report.delivered, report.settled) == (1, 1)
    assert sent == [event_id("acme#d-1", "pledge.recorded")]


@pytest.mark.dynamodb_local_only
def test_an_acknowledgement_costs_five_write_units_delivered_first_time(ddb, api):
    """As docs/capacity.md states, measured on DynamoDB Local (which reports index units):
    the commit's acks_due entry 2 (1 ×2 in the transaction), the lease 1, the record 1
    and the pledge leaving the index 1."""
    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    with capacity.instrumented(), capacity.measuring() as before:
        assert api.post("w-1", pledge_body()).status_code == 201
    with capacity.instrumented(), capacity.measuring() as spent:
        report = acks_dispatch_once(
            first_store(),
            endpoints_for=lambda t: [endpoint],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=lambda target, **kwargs: AttemptResult(200),
        )
    assert report.delivered == 1
    # claim 2 (put 1, pending index 1) + commit 18 (14 before acknowledgements, +2, and
    # +2 for the pledge's by_donor_key entry) + the intake request log's entry 1
    assert (before.write, before.index_write) == (2 + 18 + 1, 1 + 10)
    assert (spent.write, spent.index_write) == (3, 1)


def test_a_dispatcher_killed_mid_send_is_taken_over_after_its_lease(ddb, api, settings):
    """A dispatcher takes the lease, sends, and dies before recording: the pledge stays
    due; no pass sends it while the lease lives; after it, the next pass sends again with
    the same ``webhook-id`` and records under its own, newer fence."""
    assert api.post("m-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    sent: list[str] = []

    def answer(target, *, headers, **kwargs):
        sent.append(headers["webhook-id"])
        return AttemptResult(200)

    class Killed(BaseException):
        """The process dies: nothing after the send runs."""

    def dies(target, *, headers, **kwargs):
        answer(target, headers=headers)
        raise Killed

    def dispatch(sender):
        return acks_dispatch_once(
            first_store(),
            endpoints_for=lambda t: [endpoint],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=sender,
        )

    with pytest.raises(Killed):
        dispatch(dies)
    state = AckRepository(first_store()).get("acme#m-1")
    assert state is not None and state.due and state.fence == 1 and state.deliveries == {}
    assert dispatch(answer).leased == 0  # the dead dispatcher's lease still lives
    with clock.travel(settings.ACK_LEASE_S + 1):
        report = dispatch(answer)
    assert (report.leased, report.delivered, report.settled) == (1, 1, 1)
    message = event_id("acme#m-1", "pledge.recorded")
    assert sent == [message, message]
    settled = AckRepository(first_store()).get("acme#m-1")
    assert settled is not None and not settled.due and settled.fence == 2
    assert settled.deliveries["E1/pledge.recorded"].status == DeliveryStatus.DELIVERED


def test_the_retry_scale_setting_reaches_the_dispatcher(ddb, api, settings):
    """``ACK_RETRY_SCALE=0.01``: an attempt answered 500 is due again within seconds
    (30 s × 0.01, at least 1 s), not after 30 s."""
    settings.ACK_RETRY_SCALE = 0.01
    assert api.post("s-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E5", "acme", "https://crm.example.org/hooks", secret_new())
    report = acks_dispatch_once(
        first_store(),
        endpoints_for=lambda tenant: [endpoint],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=lambda target, **kwargs: AttemptResult(500),
    )
    assert report.failed == 1
    state = AckRepository(first_store()).get("acme#s-1")
    assert state is not None
    delivery = state.deliveries["E5/pledge.recorded"]
    assert delivery.status == DeliveryStatus.PENDING and delivery.last_code == 500
    assert 0 <= delivery.next_at - clock.epoch() <= 2
