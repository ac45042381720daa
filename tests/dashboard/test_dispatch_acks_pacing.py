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
    """A dispatcher's in-flight count: ``stuck`` pledges that never finish (a hanging
    endpoint's) and ``moving`` ones that finish one every ``every_s``."""

    def __init__(self, stuck: int, moving: int, every_s: float):
        self.stuck, self.moving, self.every_s = stuck, moving, every_s
        self.started = time.monotonic()

    def pending(self) -> int:
        done = int((time.monotonic() - self.started) / self.every_s)
        return self.stuck + max(0, self.moving - done)


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
    wake = Command._room([pool], done=10, stop=StopRequest([]), wakeups=NoWakeups())
    assert time.monotonic() - started < 0.6
    assert wake == Wake(None)


def test_a_commit_during_the_wait_starts_a_pass_over_its_shard(poll_1s):
    pool = Pool(stuck=20, moving=0, every_s=1)
    started = time.monotonic()
    wake = Command._room([pool], done=10, stop=StopRequest([]), wakeups=OneWakeup(0.3))
    assert time.monotonic() - started < 0.6
    assert wake == Wake(frozenset({"3"}))


def test_without_progress_or_a_commit_the_poll_still_comes(poll_1s):
    pool = Pool(stuck=20, moving=0, every_s=1)
    started = time.monotonic()
    wake = Command._room([pool], done=10, stop=StopRequest([]), wakeups=NoWakeups())
    assert 0.95 <= time.monotonic() - started < 2.0
    assert wake == Wake(None)
