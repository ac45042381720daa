"""Concurrent sends (docs/webhooks.md, "Isolation"): a dispatcher sends to many endpoints
at once, keeps each to its own limit and rate, pauses one that keeps failing, and a slow
endpoint holds up no other tenant's deliveries."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from reconciliation import clock
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.gates import BreakerChange, BreakerRules, Gates
from reconciliation.acks.models import (
    AttemptResult,
    BreakerState,
    DeliveryStatus,
    Endpoint,
    secret_new,
)
from reconciliation.acks.repository import AckRepository
from reconciliation.acks.send import KeepAlive
from tests.conftest import ApiCaller, pledge_body
from tests.helpers import AS_SYSTEM

# Sends on a pool: moto's in-process backend is not thread-safe.
pytestmark = [pytest.mark.django_db, pytest.mark.dynamodb_local_only]

PUBLIC = ["93.184.216.34"]  # the stubbed resolver's answer: nothing leaves the machine


def endpoint(name: str, tenant: str = "acme", **limits) -> Endpoint:
    return Endpoint(
        name, tenant, f"https://{name.lower()}.example.org/hooks", secret_new(), **limits
    )


@pytest.fixture
def beta(db, client) -> ApiCaller:
    """The intake API as a second tenant, ``beta``."""
    from dashboard.tenancy.models import ApiToken

    _, raw = ApiToken.issue("beta")
    return ApiCaller(client, raw, "beta")


class Recorder:
    """A sender that notes when each endpoint heard each POST, and how many were open to
    each at once at most; ``slow`` endpoints answer after ``delay_s`` (a hanging one)."""

    def __init__(self, *, slow: dict[str, float] | None = None, answer: int = 200):
        self.slow = slow or {}
        self.answer = answer
        self.lock = threading.Lock()
        self.heard: dict[str, list[float]] = {}
        self.open: dict[str, int] = {}
        self.most: dict[str, int] = {}

    def __call__(self, target, *, headers, body, **kwargs) -> AttemptResult:
        host = target.host.split(".")[0]
        with self.lock:
            self.heard.setdefault(host, []).append(time.monotonic())
            self.open[host] = self.open.get(host, 0) + 1
            self.most[host] = max(self.most.get(host, 0), self.open[host])
        try:
            time.sleep(self.slow.get(host, 0.01))
            return AttemptResult(self.answer)
        finally:
            with self.lock:
                self.open[host] -= 1


def test_a_hanging_endpoint_holds_up_no_other_tenant(ddb, api, beta):
    """Tenant beta's endpoint takes 1.5 s an answer (hanging); tenant acme's answers at
    once. One pass over 6 pledges of each: every acme delivery is heard within half a
    second of the pass's start, while beta's take their 1.5 s, all delivered."""
    for n in range(6):
        assert api.post(f"iso-a-{n}", pledge_body()).status_code == 201
        assert beta.post(f"iso-b-{n}", pledge_body()).status_code == 201
    endpoints = {"acme": [endpoint("Fast")], "beta": [endpoint("Hangs", "beta")]}
    sender = Recorder(slow={"hangs": 1.5})
    started = time.monotonic()
    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda t: endpoints[t],
        resolve=lambda h, p: PUBLIC,
        sender=sender,
    )
    assert (report.delivered, report.settled) == (12, 12)
    fast = [at - started for at in sender.heard["fast"]]
    assert len(fast) == 6 and max(fast) < 0.5, fast
    assert len(sender.heard["hangs"]) == 6


def test_sends_to_one_endpoint_run_at_once(ddb, api):
    """Four pledges to one endpoint whose answer waits until four POSTs are open at once
    (a barrier): a dispatcher sending one at a time would never pass it."""
    for n in range(4):
        assert api.post(f"at-once-{n}", pledge_body()).status_code == 201
    barrier = threading.Barrier(4, timeout=10)

    def together(target, **kwargs) -> AttemptResult:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return AttemptResult(None, "alone")
        return AttemptResult(200)

    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda t: [endpoint("E1")],
        resolve=lambda h, p: PUBLIC,
        sender=together,
    )
    assert (report.delivered, report.failed) == (4, 0)


def test_an_endpoint_has_no_more_than_its_limit_open(ddb, api):
    """An endpoint limited to 2 requests at once gets 8 deliveries, never more than 2 open
    at once; none is deferred (the rest wait in its queue) and all are delivered."""
    for n in range(8):
        assert api.post(f"limit-{n}", pledge_body()).status_code == 201
    sender = Recorder(slow={"e1": 0.1})
    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda t: [endpoint("E1", max_in_flight=2)],
        resolve=lambda h, p: PUBLIC,
        sender=sender,
    )
    assert (report.delivered, report.deferred) == (8, 0)
    assert sender.most["e1"] == 2


def test_an_endpoint_rate_spaces_its_deliveries(ddb, api):
    """At 5 deliveries a second (a burst of one second's worth, then one each 0.2 s), 10
    deliveries span at least 0.9 s; all delivered."""
    for n in range(10):
        assert api.post(f"rate-{n}", pledge_body()).status_code == 201
    sender = Recorder()
    report = acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda t: [endpoint("E1", rate_per_s=5.0)],
        resolve=lambda h, p: PUBLIC,
        sender=sender,
    )
    assert report.delivered == 10
    heard = sorted(sender.heard["e1"])
    assert heard[-1] - heard[0] >= 0.9


def test_the_breaker_pauses_an_endpoint_that_keeps_failing(ddb, api):
    """One request at a time to an endpoint answering 500: after 3 failed attempts in a
    row its breaker opens (told to the edge) and the other pledges' deliveries are
    deferred to its end, with no attempt spent. After the pause one trial goes out; it
    succeeds, the breaker closes and every delivery goes out."""
    keys = [f"breaker-{n}" for n in range(6)]
    for key in keys:
        assert api.post(key, pledge_body()).status_code == 201
    changes: list[BreakerChange] = []
    failing = endpoint("E1", max_in_flight=1)
    gates = Gates(BreakerRules(failures_to_open=3, open_s=30))  # one dispatcher's, kept

    def dispatch(answer: int):
        return acks_dispatch_once(
            AS_SYSTEM.store,
            endpoints_for=lambda t: [failing],
            resolve=lambda h, p: PUBLIC,
            sender=Recorder(answer=answer),
            on_breaker=changes.append,
            gates=gates,
        )

    report = dispatch(500)
    assert (report.failed, report.deferred) == (3, 3)
    assert [(c.state, c.failures) for c in changes] == [(BreakerState.OPEN, 3)]
    paused_until = changes[0].until
    assert paused_until is not None
    repository = AckRepository(AS_SYSTEM.store)
    states = [repository.get(f"acme#{k}") for k in keys]
    untouched = [s for s in states if s and s.deliveries["E1/pledge.recorded"].attempts == 0]
    assert len(untouched) == 3
    assert all(s.due_at and s.due_at >= int(paused_until) for s in untouched)

    with clock.travel(60):  # past the pause and the failed ones' first retry
        report = dispatch(200)
    assert (report.delivered, report.settled) == (6, 6)
    assert [c.state for c in changes] == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


def test_connections_to_an_endpoint_are_kept_alive(ddb, api, acme_sink):
    """Ten pledges to a real sink, one request at a time: the sender opens one connection
    and carries all ten POSTs on it (a connection each without keep-alive), and the sink
    processes each once."""
    sink = acme_sink()
    for n in range(10):
        assert api.post(f"alive-{n}", pledge_body()).status_code == 201
    from dashboard.tenancy.models import WebhookEndpoint

    row = WebhookEndpoint.objects.get()
    sender = KeepAlive()
    try:
        report = acks_dispatch_once(
            AS_SYSTEM.store,
            endpoints_for=lambda t: [replace(row.as_endpoint(), max_in_flight=1)],
            sender=sender,
        )
    finally:
        sender.close()
    assert report.delivered == 10
    assert sender.opened == 1
    stats = sink.stats()
    assert (len(stats["processed"]), stats["duplicates"], stats["rejected"]) == (10, 0, 0)
    state = AckRepository(AS_SYSTEM.store).get("acme#alive-0")
    assert state is not None
    assert state.deliveries[f"E{row.pk}/pledge.recorded"].status == DeliveryStatus.DELIVERED
