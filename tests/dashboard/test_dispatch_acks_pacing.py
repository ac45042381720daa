"""How ``dispatch_acks`` paces its passes through a backlog: the next pass starts once
half of the last one's pledges are done, or a commit wakes it, never later than the
poll. Pledges held by an endpoint that hangs stay in flight for its timeouts: they must
not hold up the next pass for everyone else."""

from __future__ import annotations

import time

import pytest

from dashboard.tenancy.management.commands.dispatch_acks import Command, StopRequest
from reconciliation.acks.wakeup import Wake


class Pool:
    """A dispatcher's progress: ``stuck`` pledges that never finish (a hanging
    endpoint's) and ``moving`` ones that finish one every ``every_s``, after ``ended``
    had ended already (before the pass, or while it was starting its sends)."""

    def __init__(self, stuck: int, moving: int, every_s: float, ended: int = 0):
        self.stuck, self.moving, self.every_s = stuck, moving, every_s
        self.ended = ended
        self.started = time.monotonic()

    def finished(self) -> int:
        done = int((time.monotonic() - self.started) / self.every_s)
        return self.ended + min(self.moving, done)


class NoWakeups:
    def woken_within(self, timeout: float) -> Wake | None:
        time.sleep(timeout)
        return None


class OneWakeup:
    def __init__(self, after_s: float):
        self.at = time.monotonic() + after_s

    def woken_within(self, timeout: float) -> Wake | None:
        time.sleep(timeout)
        return Wake(frozenset({"3"})) if time.monotonic() >= self.at else None


@pytest.fixture
def poll_1s(settings):
    settings.ACK_POLL_S = 1.0


def test_a_hanging_endpoints_pledges_do_not_hold_up_the_next_pass(poll_1s):
    """8 of the last pass's 20 pledges hang; the other 12 finish within 0.2 s: the next
    pass starts once 10 are done, not at the poll (it waited the poll before, as the
    pool never fell under half of what the pass took)."""
    pool = Pool(stuck=8, moving=12, every_s=0.02)
    started = time.monotonic()
    wake = Command._room([pool], done=10, since=0, stop=StopRequest([]), wakeups=NoWakeups())
    assert time.monotonic() - started < 0.6
    assert wake == Wake(None)


def test_a_commit_during_the_wait_starts_a_pass_over_its_shard(poll_1s):
    pool = Pool(stuck=20, moving=0, every_s=1)
    started = time.monotonic()
    wake = Command._room([pool], done=10, since=0, stop=StopRequest([]), wakeups=OneWakeup(0.3))
    assert time.monotonic() - started < 0.6
    assert wake == Wake(frozenset({"3"}))


def test_without_progress_or_a_commit_the_poll_still_comes(poll_1s):
    pool = Pool(stuck=20, moving=0, every_s=1)
    started = time.monotonic()
    wake = Command._room([pool], done=10, since=0, stop=StopRequest([]), wakeups=NoWakeups())
    assert 0.95 <= time.monotonic() - started < 2.0
    assert wake == Wake(None)


def test_pledges_that_ended_while_the_pass_started_its_sends_count(poll_1s):
    """A pass took 800 pledges and 700 of them ended before it returned (a fast
    endpoint, 32 workers sending while the pass starts the rest): half are done, the
    next pass starts at once. Counted from the pass's end, this waited for 400 more of
    the 100 in flight, the poll, with pledges due (a one-dispatcher drain idled 2 s)."""
    pool = Pool(stuck=100, moving=0, every_s=1, ended=5 + 700)
    started = time.monotonic()
    wake = Command._room([pool], done=400, since=5, stop=StopRequest([]), wakeups=NoWakeups())
    assert time.monotonic() - started < 0.3
    assert wake == Wake(None)


@pytest.mark.django_db
def test_a_dispatcher_counts_the_pledges_that_ended_within_its_pass(ddb, api):
    """What the pacing counts: sent one at a time in the pass's own thread, all three
    pledges end before ``run_pass`` returns; none is in flight, three finished."""
    from reconciliation.acks.dispatch import Dispatcher
    from reconciliation.acks.models import AttemptResult, Endpoint, secret_new
    from reconciliation.acks.shard_lease import ShardLeases
    from tests.conftest import pledge_body
    from tests.helpers import AS_SYSTEM

    endpoint = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
    for n in range(3):
        assert api.post(f"paced-{n}", pledge_body()).status_code == 201
    dispatcher = Dispatcher(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [endpoint],
        leases=ShardLeases(AS_SYSTEM.store, owner="paced"),
        workers=0,
        resolve=lambda host, port: ["93.184.216.34"],
        sender=lambda target, **kwargs: AttemptResult(204),
    )
    before = dispatcher.finished()
    assert dispatcher.run_pass() == 3
    assert (dispatcher.pending(), dispatcher.finished() - before) == (0, 3)
    dispatcher.close()
