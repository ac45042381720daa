"""``dispatch_acks``' stop request (SIGTERM, SIGINT) in its own process: what its signal
handler may do. A Python signal handler runs in the main thread between two of its
bytecodes, wherever that thread is, so it must never wait for anything that thread may be
holding (the real processes: tests/reconciliation/acks/test_dispatcher_stop.py)."""

from __future__ import annotations

import signal
import sys
import threading
import time

from dashboard.tenancy.management.commands.dispatch_acks import StopRequest
from reconciliation.acks.shard_lease import ShardLeases
from tests.helpers import AS_SYSTEM


def test_a_stop_asked_between_any_two_lines_of_the_poll_wait_ends_it_at_once():
    """The handler run at every line of the wait between passes (and of what it calls,
    as a signal may land there): the wait returns at once and the leases are closed;
    a handler taking a lock the wait holds (``threading.Event.set``) would hang here."""
    leases = ShardLeases(AS_SYSTEM.store, owner="a")
    stop = StopRequest([leases])

    def signal_at_every_line(frame, event, arg):
        if event == "line":
            stop.ask(signal.SIGTERM, None)
        return signal_at_every_line

    def poll_wait() -> None:
        sys.settrace(signal_at_every_line)
        try:
            stop.wait(30)
        finally:
            sys.settrace(None)

    # Traced in a thread of its own, so a hang fails the test instead of the session.
    waiting = threading.Thread(target=poll_wait, daemon=True)
    started = time.monotonic()
    waiting.start()
    waiting.join(10)
    assert not waiting.is_alive(), "the stop handler waits for a lock the wait holds"
    assert time.monotonic() - started < 10
    assert stop.asked and leases.closed


def test_a_stop_asked_while_waiting_between_passes_ends_the_wait_promptly():
    """Asked one tenth into a 30 s poll wait, the wait ends then, not at its end (the
    bound is loose: a loaded machine may be slow, never 15 s slow on a tenth's poll)."""
    stop = StopRequest([])
    timer = threading.Timer(0.1, stop.ask, args=(signal.SIGTERM, None))
    started = time.monotonic()
    timer.start()
    stop.wait(30)
    assert stop.asked
    assert time.monotonic() - started < 15
