"""The dispatcher's shard lease and the fence on a pledge's deliveries, and the
dispatch-time address check, on the engines."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest

from reconciliation import clock
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import (
    AttemptResult,
    Delivery,
    DeliveryStatus,
    Endpoint,
    EventType,
    delivery_key,
    event_id,
    secret_new,
)
from reconciliation.acks.repository import AckRepository, LeaseLost
from reconciliation.acks.shard_lease import ShardLeaseHeld, ShardLeases
from reconciliation.dynamo.tables import ack_shard
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM, race
from tests.reconciliation.acks.conftest import same_shard_keys

pytestmark = pytest.mark.django_db


def test_a_dispatcher_whose_lease_was_taken_over_records_nothing(ddb, api, settings):
    """A holds the shard's lease and reads the pledge; while A's lease lives B cannot take
    it. A pauses past its lease; B takes it, sends and records: the pledge's fence moved
    on, so A's record from its old read is refused (LeaseLost), and A cannot renew."""
    assert api.post("f-1", pledge_body()).status_code == 201
    store = AS_SYSTEM.store
    shard = ack_shard("acme#f-1")
    a, b = ShardLeases(store, owner="a"), ShardLeases(store, owner="b")
    assert a.hold(shard).fence == 1
    with pytest.raises(ShardLeaseHeld):
        b.hold(shard)  # A's lease is live
    repository = AckRepository(store)
    seen_by_a = repository.get("acme#f-1")
    assert seen_by_a is not None and seen_by_a.due and seen_by_a.fence == 0

    delivered = Delivery("E1", "https://x.example/", status=DeliveryStatus.DELIVERED, attempts=1)
    done = {delivered.key: delivered}
    with clock.travel(settings.ACK_LEASE_S + 1):
        assert b.hold(shard).fence == 2
        seen_by_b = repository.get("acme#f-1")
        assert seen_by_b is not None
        assert (
            repository.record(
                "acme#f-1", fence=seen_by_b.fence, status="RECORDED", deliveries=done, next_due=None
            )
            == 1
        )
        with pytest.raises(LeaseLost):
            repository.record(
                "acme#f-1", fence=seen_by_a.fence, status="RECORDED", deliveries={}, next_due=9
            )
        with pytest.raises(ShardLeaseHeld):
            a.hold(shard)
    settled = repository.get("acme#f-1")
    assert settled is not None and not settled.due and settled.fence == 1
    assert settled.deliveries["E1/pledge.recorded"].status == DeliveryStatus.DELIVERED


def test_a_shard_lease_is_renewed_only_near_its_end_and_released_when_done(ddb):
    """Held, the lease is not written again until less than half of it is left; then its
    holder renews it (a new fence), and released it is free at once for another."""
    store = AS_SYSTEM.store
    a, b = ShardLeases(store, owner="a", lease_s=60), ShardLeases(store, owner="b", lease_s=60)
    taken = a.hold("A#0")
    assert (taken.owner, taken.fence) == ("a", 1)
    with clock.travel(29):
        assert a.hold("A#0") == taken  # 31 s left: kept, no write
    with clock.travel(31):
        renewed = a.hold("A#0")  # 29 s left: renewed
    assert renewed.fence == 2 and renewed.until > taken.until
    with pytest.raises(ShardLeaseHeld):
        b.hold("A#0")
    assert b.hold("A#1").fence == 1  # shards are leased apart
    a.release()
    assert b.hold("A#0").fence == 3


def dispatched_with_first_post(
    store, leases: ShardLeases, endpoints: list[Endpoint], *, during: Callable[[], object]
):
    """One pass with ``leases`` in which ``during`` happens while the first POST is under
    way (answered 200): the bodies sent and the pass's report."""
    sent: list[bytes] = []

    def answer(target, *, body, **kwargs):
        sent.append(body)
        if len(sent) == 1:
            during()
        return AttemptResult(200)

    report = acks_dispatch_once(
        store,
        endpoints_for=lambda t: endpoints,
        resolve=lambda host, port: ["93.184.216.34"],
        sender=answer,
        leases=leases,
        # One worker: the sends after the first wait for it, so "during the first POST"
        # is before every other (a pool's case: test_..._mid_pool_... below).
        workers=1,
    )
    return sent, report


def test_a_dispatcher_asked_to_stop_mid_send_ends_that_send_and_starts_no_other(ddb, api):
    """Closed during a POST (``dispatch_acks``'s SIGTERM handler closes its leases), the
    pass records the send under way, starts none for the shard's other due pledges, and
    the lease it gives back is free at once for the next dispatcher."""
    keys = same_shard_keys(3, prefix="s")
    for key in keys:
        assert api.post(key, pledge_body()).status_code == 201
    store = AS_SYSTEM.store
    leases = ShardLeases(store, owner="a")
    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    # The signal arrives while the first POST is under way (the handler closes the leases).
    sent, report = dispatched_with_first_post(store, leases, [endpoint], during=leases.close)
    assert len(sent) == 1 and report.delivered == 1
    assert (report.lease_lost, report.shards_busy) == (0, 0)  # not another's doing
    repository = AckRepository(store)
    still_due = [k for k in keys if (state := repository.get(f"acme#{k}")) and state.due]
    assert len(still_due) == 2
    with pytest.raises(ShardLeaseHeld):
        leases.hold(ack_shard(f"acme#{keys[0]}"))  # closed: no lease more
    assert leases.release() == 1
    assert ShardLeases(store, owner="b").hold(ack_shard(f"acme#{keys[0]}")).fence == 2


def test_a_dispatcher_asked_to_stop_between_two_endpoints_records_the_first(ddb, api):
    """Closed during the POST to a pledge's first endpoint, the pass sends to no other
    endpoint, and records the answer it had: the first endpoint's delivery DELIVERED (not
    sent again by the next dispatcher), the second's still due."""
    assert api.post("two-1", pledge_body()).status_code == 201
    store = AS_SYSTEM.store
    leases = ShardLeases(store, owner="a")
    endpoints = two_endpoints()
    sent, report = dispatched_with_first_post(store, leases, endpoints, during=leases.close)
    assert len(sent) == 1 and report.delivered == 1
    assert_first_recorded_second_due(store, "acme#two-1", endpoints)
    assert leases.release() == 1


@pytest.mark.dynamodb_local_only  # a pool: moto's in-process backend is not thread-safe
def test_a_dispatcher_asked_to_stop_mid_pool_records_the_sends_under_way(ddb, api):
    """Four pledges, two POSTs open at once (the endpoint's limit), the other two queued
    behind them: the stop comes while both are open. Both are answered and recorded;
    the queued two never start (each finds the lease closed) and stay due as they were."""
    keys = same_shard_keys(4, prefix="pool")
    for key in keys:
        assert api.post(key, pledge_body()).status_code == 201
    store = AS_SYSTEM.store
    leases = ShardLeases(store, owner="a")
    both_open, closed = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)
    sent: list[str] = []

    def answer(target, *, headers, **kwargs):
        sent.append(headers["webhook-id"])
        if both_open.wait() == 0:
            leases.close()  # the signal, while two POSTs are open
        closed.wait()  # neither answers before it
        return AttemptResult(200)

    endpoint = Endpoint(
        "E1", "acme", "https://crm.example.org/hooks", secret_new(), max_in_flight=2
    )
    report = acks_dispatch_once(
        store,
        endpoints_for=lambda t: [endpoint],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=answer,
        leases=leases,
        workers=4,
    )
    assert len(sent) == 2 and (report.delivered, report.settled, report.lease_lost) == (2, 2, 0)
    repository = AckRepository(store)
    states = [repository.get(f"acme#{k}") for k in keys]
    assert sum(1 for s in states if s and s.due and not s.deliveries) == 2
    assert leases.release() == 1


def two_endpoints() -> list[Endpoint]:
    return [
        Endpoint(name, "acme", f"https://crm.example.org/{name}", secret_new())
        for name in ("E1", "E2")
    ]


def assert_first_recorded_second_due(store, intent_id: str, endpoints: list[Endpoint]) -> None:
    """The pledge is still due; the first endpoint's delivery is recorded DELIVERED (not
    sent again by the next dispatcher), the second's is not settled."""
    state = AckRepository(store).get(intent_id)
    assert state is not None and state.due
    first, second = (delivery_key(e.endpoint_id, EventType.PLEDGE_RECORDED) for e in endpoints)
    assert state.deliveries[first].status == DeliveryStatus.DELIVERED
    assert second not in state.deliveries or not state.deliveries[second].settled


def test_a_dispatcher_overtaken_between_two_endpoints_records_the_first(ddb, api, settings):
    """A's lease runs out during the POST to a pledge's first endpoint and B takes the
    shard: A sends to no other endpoint, and records the answer it had (fenced on the
    pledge as A read it, so it could not write over B's record), not leaving B to send it
    again."""
    assert api.post("two-2", pledge_body()).status_code == 201
    store = AS_SYSTEM.store
    shard = ack_shard("acme#two-2")
    endpoints = two_endpoints()
    with contextlib.ExitStack() as later:

        def overtaken() -> None:
            # A paused past its lease mid-POST; B took the shard meanwhile.
            later.enter_context(clock.travel(settings.ACK_LEASE_S + 1))
            assert ShardLeases(store, owner="b").hold(shard).owner == "b"

        a = ShardLeases(store, owner="a")
        sent, report = dispatched_with_first_post(store, a, endpoints, during=overtaken)
    assert len(sent) == 1 and (report.delivered, report.lease_lost) == (1, 1)
    assert_first_recorded_second_due(store, "acme#two-2", endpoints)


def test_an_endpoint_now_resolving_to_a_private_address_is_not_sent_to(ddb, api, settings):
    """At dispatch the host is resolved again; a private answer (DNS rebinding) is refused
    before any connection: the attempt is recorded as refused and retried later."""
    settings.WEBHOOK_ALLOW_LOOPBACK = False
    assert api.post("r-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E9", "acme", "https://crm.example.org/hooks", secret_new())

    def never(*args, **kwargs):
        raise AssertionError("no connection may be made to a refused address")

    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [endpoint],
        resolve=lambda host, port: ["10.0.0.5"],
        sender=never,
    )
    assert (report.delivered, report.failed) == (0, 1)
    state = AckRepository(AS_SYSTEM.store).get("acme#r-1")
    assert state is not None and state.due
    delivery = state.deliveries["E9/pledge.recorded"]
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert "private address" in delivery.last_error


def test_a_pledge_of_a_tenant_without_endpoints_is_settled_quietly(ddb, api):
    """No endpoint subscribed: the pledge leaves ``acks_due`` with no delivery."""
    assert api.post("n-1", pledge_body()).status_code == 201
    report = acks_dispatch_once(AS_SYSTEM.store, endpoints_for=lambda tenant: [])
    assert (report.settled, report.delivered) == (1, 0)
    state = AckRepository(AS_SYSTEM.store).get("acme#n-1")
    assert state is not None and not state.due and state.deliveries == {}


def test_a_disabled_endpoint_spends_no_attempt_and_is_looked_at_later(ddb, api):
    """A delivery to a disabled endpoint is not sent and spends no attempt; the pledge
    stays due, an hour later, so it is not leased on every pass meanwhile; enabled
    again, the endpoint gets the event."""
    assert api.post("d-1", pledge_body()).status_code == 201
    disabled = Endpoint("E3", "acme", "https://crm.example.org/hooks", secret_new(), enabled=False)

    def never(*args, **kwargs):
        raise AssertionError("a disabled endpoint is never sent to")

    paused = acks_dispatch_once(AS_SYSTEM.store, endpoints_for=lambda t: [disabled], sender=never)
    assert (paused.leased, paused.failed, paused.delivered, paused.settled) == (1, 0, 0, 0)
    state = AckRepository(AS_SYSTEM.store).get("acme#d-1")
    assert state is not None and state.due
    delivery = state.deliveries["E3/pledge.recorded"]
    assert (delivery.attempts, delivery.status) == (0, DeliveryStatus.PENDING)
    assert delivery.next_at >= clock.epoch() + 3600 - 1 and state.due_at == delivery.next_at
    assert acks_dispatch_once(AS_SYSTEM.store, endpoints_for=lambda t: [disabled]).leased == 0

    enabled = replace(disabled, enabled=True)
    sent: list[str] = []

    def answer(target, *, headers, **kwargs):
        sent.append(headers["webhook-id"])
        return AttemptResult(204)

    with clock.travel(3601):
        report = acks_dispatch_once(
            AS_SYSTEM.store,
            endpoints_for=lambda t: [enabled],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=answer,
        )
    assert (report.delivered, report.settled) == (1, 1)
    assert sent == [event_id("acme#d-1", "pledge.recorded")]


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
        # Sends in this thread (workers=0): the exception that stands for the process
        # dying ends the pass right there, as a kill would.
        return acks_dispatch_once(
            AS_SYSTEM.store,
            endpoints_for=lambda t: [endpoint],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=sender,
            workers=0,
        )

    with pytest.raises(Killed):
        dispatch(dies)
    state = AckRepository(AS_SYSTEM.store).get("acme#m-1")
    assert state is not None and state.due and state.fence == 0 and state.deliveries == {}
    busy = dispatch(answer)  # the dead dispatcher's shard lease still lives
    assert (busy.leased, busy.shards_busy) == (0, 1)
    with clock.travel(settings.ACK_LEASE_S + 1):
        report = dispatch(answer)
    assert (report.leased, report.delivered, report.settled) == (1, 1, 1)
    message = event_id("acme#m-1", "pledge.recorded")
    assert sent == [message, message]
    settled = AckRepository(AS_SYSTEM.store).get("acme#m-1")
    assert settled is not None and not settled.due and settled.fence == 1
    assert settled.deliveries["E1/pledge.recorded"].status == DeliveryStatus.DELIVERED


def test_no_post_starts_on_a_shard_lease_that_could_run_out_during_it(ddb, api, settings):
    """The dispatcher's held lease has 5 s left, less than one attempt's timeouts: it is
    renewed (a new fence) before the POST starts, so no successor can take the shard while
    the POST may still be running."""
    leases = ShardLeases(AS_SYSTEM.store, owner="a")
    shard = ack_shard("acme#g-1")
    taken = leases.hold(shard)
    assert api.post("g-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    during: list[int] = []

    def answer(target, **kwargs):
        during.append(leases.held[shard].left(clock.epoch()))
        return AttemptResult(200)

    with clock.travel(taken.left(clock.epoch()) - 5):
        report = acks_dispatch_once(
            AS_SYSTEM.store,
            endpoints_for=lambda t: [endpoint],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=answer,
            leases=leases,
        )
    assert report.delivered == 1 and leases.held[shard].fence == taken.fence + 1
    [left] = during
    assert left >= settings.ACK_CONNECT_TIMEOUT_S + settings.ACK_READ_TIMEOUT_S


@pytest.mark.dynamodb_local_only  # a race: moto's in-process backend is not thread-safe
def test_two_dispatchers_never_send_one_pledge_at_once(ddb, api):
    """Two dispatchers, each with leases of its own, start a pass at once over a shard
    with three pledges due. The one holding the shard's lease keeps its POSTs open
    until the other's pass is over: the other sent nothing meanwhile (the shard was
    held); each pledge was sent once, never two at a time (one dispatcher sends several
    pledges at once: its pool)."""
    keys = same_shard_keys(3, prefix="race")
    for key in keys:
        assert api.post(key, pledge_body()).status_code == 201
    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    lock = threading.Lock()
    sent: list[str] = []
    in_flight: Counter[str] = Counter()  # per pledge's event, now
    most: Counter[str] = Counter()  # per pledge's event, most at once
    done = {"a": threading.Event(), "b": threading.Event()}

    def dispatcher(name: str, other: str):
        def answer(target, *, headers, **kwargs):
            message = headers["webhook-id"]
            with lock:
                sent.append(message)
                in_flight[message] += 1
                most[message] = max(most[message], in_flight[message])
            done[other].wait(timeout=10)  # were both sending, each would wait here
            with lock:
                in_flight[message] -= 1
            return AttemptResult(200)

        try:
            return acks_dispatch_once(
                AS_SYSTEM.store,
                endpoints_for=lambda t: [endpoint],
                resolve=lambda host, port: ["93.184.216.34"],
                sender=answer,
                leases=ShardLeases(AS_SYSTEM.store, owner=name),
            )
        finally:
            done[name].set()

    reports = race(lambda: dispatcher("a", "b"), lambda: dispatcher("b", "a"))
    assert sorted((r.delivered, r.shards_busy) for r in reports) == [(0, 1), (3, 0)]
    assert sorted(sent) == sorted(event_id(f"acme#{k}", "pledge.recorded") for k in keys)
    assert set(most.values()) == {1}


def test_the_retry_scale_setting_reaches_the_dispatcher(ddb, api, settings):
    """``ACK_RETRY_SCALE=0.01``: an attempt answered 500 is due again within seconds
    (30 s × 0.01, at least 1 s), not after 30 s."""
    settings.ACK_RETRY_SCALE = 0.01
    assert api.post("s-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E5", "acme", "https://crm.example.org/hooks", secret_new())
    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [endpoint],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=lambda target, **kwargs: AttemptResult(500),
    )
    assert report.failed == 1
    state = AckRepository(AS_SYSTEM.store).get("acme#s-1")
    assert state is not None
    delivery = state.deliveries["E5/pledge.recorded"]
    assert delivery.status == DeliveryStatus.PENDING and delivery.last_code == 500
    assert 0 <= delivery.next_at - clock.epoch() <= 2
