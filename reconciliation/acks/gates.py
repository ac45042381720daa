"""Per-endpoint gates of one dispatcher (docs/webhooks.md, "Isolation"): how many
requests it may have open to an endpoint, how fast it may send to it, and its circuit
breaker.

An endpoint that hangs or fails must cost only its own share of the dispatcher, never
another tenant's latency. So a send never *blocks* on a gate: the gate answers at once
whether the send runs now (a slot was free), waits in the endpoint's own queue (its
slots are busy: the worker that frees one starts it), or is deferred (its breaker is
open, or its queue is full): the delivery is then due again later with no attempt spent.
A gate is memory only; the breaker's state is also told to the edge, which shows it on
the Acknowledgements page and shares it with the other dispatchers through the
endpoint's row (``Endpoint.paused_until``).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from reconciliation.acks.models import BreakerState, Endpoint

# A queue longer than this many requests per slot is full: the rest are deferred, so a
# slow endpoint's backlog waits in DynamoDB (as due pledges), not in the process.
QUEUE_PER_SLOT = 128
# With a rate, at most this many seconds of its sends wait in the queue.
RATE_QUEUE_S = 10.0
# A delivery deferred because its endpoint's queue is full is looked at again this soon.
QUEUE_FULL_DEFER_S = 1.0


class Task(Protocol):
    """A send the gate may hold: run with a slot's ticket, or deferred."""

    def __call__(self, ticket: Ticket) -> None: ...

    def defer(self, until: float) -> None: ...


class Offered(Enum):
    RUN = "run"  # a slot is the caller's: start the task now
    QUEUED = "queued"  # the gate starts it when a slot frees (``Finished.start``)
    DEFERRED = "deferred"  # not now: due again at ``Offer.until``, no attempt spent


@dataclass(frozen=True)
class Ticket:
    """A slot held for one send; ``trial`` when it is the half-open breaker's trial."""

    endpoint_id: str
    trial: bool = False


@dataclass(frozen=True)
class Offer:
    outcome: Offered
    until: float = 0.0  # epoch seconds, when DEFERRED
    ticket: Ticket | None = None  # when RUN


@dataclass(frozen=True)
class BreakerChange:
    """The breaker moved: told to the edge (the page, the endpoint's row)."""

    endpoint_id: str
    state: BreakerState
    until: float | None  # epoch seconds, while OPEN
    failures: int  # failed attempts in a row


@dataclass(frozen=True)
class Finished:
    """What a finished send frees: queued tasks to start now (with their tickets), and
    queued tasks the breaker's opening deferred until ``deferred_until``."""

    start: tuple[tuple[Task, Ticket], ...] = ()
    deferred: tuple[Task, ...] = ()
    deferred_until: float = 0.0
    change: BreakerChange | None = None


@dataclass(frozen=True)
class BreakerRules:
    failures_to_open: int = 5  # failed attempts in a row
    open_s: float = 30.0  # the first pause; each failed trial doubles it
    max_open_s: float = 600.0


class EndpointGate:
    """One endpoint's slots, rate and breaker, for one dispatcher. Thread-safe."""

    def __init__(self, endpoint: Endpoint, rules: BreakerRules):
        self.endpoint_id = endpoint.endpoint_id
        self.rules = rules
        self.lock = threading.Lock()
        self.limit = max(1, endpoint.max_in_flight)
        self.rate = endpoint.rate_per_s
        self.in_flight = 0
        self.waiting: deque[Task] = deque()
        self.state = BreakerState.CLOSED
        self.failures = 0
        self.opens = 0  # pauses in a row: each failed trial doubles the next
        self.open_until = 0.0
        self.trial_out = False
        self.tokens = 0.0
        self.tokens_at: float | None = None

    def configure(self, endpoint: Endpoint) -> None:
        """The endpoint's limits as its row says now (changed in the admin meanwhile)."""
        with self.lock:
            self.limit = max(1, endpoint.max_in_flight)
            self.rate = endpoint.rate_per_s

    def _queue_room(self) -> int:
        if self.rate:
            return max(self.limit, math.ceil(self.rate * RATE_QUEUE_S))
        return self.limit * QUEUE_PER_SLOT

    def offer(
        self, task: Task, *, now: float, paused_until: float | None = None
    ) -> tuple[Offer, BreakerChange | None]:
        """Run ``task`` now, queue it, or defer it; and the breaker's move, if any."""
        with self.lock:
            change = None
            if self.state == BreakerState.OPEN:
                if now < self.open_until:
                    return Offer(Offered.DEFERRED, self.open_until), None
                # The pause is over: this send is the trial; the others queue behind it.
                self.state = BreakerState.HALF_OPEN
                self.trial_out = False
                change = self._change()
            elif self.state == BreakerState.CLOSED and paused_until and now < paused_until:
                # Another dispatcher's breaker paused it (the endpoint's row).
                return Offer(Offered.DEFERRED, paused_until), None
            if self.state == BreakerState.HALF_OPEN:
                if not self.trial_out and self.in_flight < self.limit:
                    self.trial_out = True
                    self.in_flight += 1
                    return Offer(Offered.RUN, ticket=Ticket(self.endpoint_id, trial=True)), change
            elif self.in_flight < self.limit and not self.waiting:
                self.in_flight += 1
                return Offer(Offered.RUN, ticket=Ticket(self.endpoint_id)), change
            if len(self.waiting) >= self._queue_room():
                return Offer(Offered.DEFERRED, now + QUEUE_FULL_DEFER_S), change
            self.waiting.append(task)
            return Offer(Offered.QUEUED), change

    def token_wait(self, *, now: float) -> float:
        """Seconds the send holding a slot waits for its token (0 without a rate). The
        token is taken now, so concurrent sends never share one; the wait is bounded by
        the queue's room (``RATE_QUEUE_S``)."""
        with self.lock:
            if not self.rate:
                return 0.0
            burst = max(1.0, self.rate)  # a second's worth at most
            if self.tokens_at is None:
                self.tokens, self.tokens_at = burst, now
            self.tokens = min(burst, self.tokens + (now - self.tokens_at) * self.rate)
            self.tokens_at = now
            self.tokens -= 1
            return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def finish(self, ticket: Ticket, *, ok: bool | None, now: float) -> Finished:
        """The send holding ``ticket`` ended: ``ok`` whether it was answered 2xx (``None``:
        it never started, no attempt spent, the breaker learns nothing)."""
        with self.lock:
            self.in_flight -= 1
            change = self._learn(ticket, ok, now) if ok is not None else None
            if self.state == BreakerState.OPEN:
                deferred = tuple(self.waiting)
                self.waiting.clear()
                return Finished(deferred=deferred, deferred_until=self.open_until, change=change)
            start: list[tuple[Task, Ticket]] = []
            if self.state == BreakerState.HALF_OPEN:
                if not self.trial_out and self.waiting:
                    self.trial_out = True
                    self.in_flight += 1
                    start.append((self.waiting.popleft(), Ticket(self.endpoint_id, trial=True)))
            else:
                while self.waiting and self.in_flight < self.limit:
                    self.in_flight += 1
                    start.append((self.waiting.popleft(), Ticket(self.endpoint_id)))
            return Finished(start=tuple(start), change=change)

    def _learn(self, ticket: Ticket, ok: bool, now: float) -> BreakerChange | None:
        if ticket.trial:
            self.trial_out = False
            if ok:
                self.state, self.failures, self.opens = BreakerState.CLOSED, 0, 0
            else:
                self.failures += 1
                self._open(now)
            return self._change()
        if ok:
            self.failures = 0
            return None
        self.failures += 1
        if self.state == BreakerState.CLOSED and self.failures >= self.rules.failures_to_open:
            self._open(now)
            return self._change()
        return None

    def _open(self, now: float) -> None:
        self.opens += 1
        pause = self.rules.open_s * 2 ** (self.opens - 1)
        self.state = BreakerState.OPEN
        self.open_until = now + min(self.rules.max_open_s, pause)

    def _change(self) -> BreakerChange:
        until = self.open_until if self.state == BreakerState.OPEN else None
        return BreakerChange(self.endpoint_id, self.state, until, self.failures)


class Gates:
    """Every endpoint's gate of one dispatcher, made on first use."""

    def __init__(self, rules: BreakerRules | None = None):
        self.rules = rules or BreakerRules()
        self.lock = threading.Lock()
        self.by_id: dict[str, EndpointGate] = {}

    def of(self, endpoint: Endpoint) -> EndpointGate:
        with self.lock:
            gate = self.by_id.get(endpoint.endpoint_id)
            if gate is None:
                gate = self.by_id[endpoint.endpoint_id] = EndpointGate(endpoint, self.rules)
                return gate
        gate.configure(endpoint)
        return gate
