"""``dispatch_acks``: deliver the acknowledgements that are due (docs/webhooks.md).

A pass, per shard of ``acks_due`` with pledges due that this dispatcher may hold (its
fair share, reconciliation/acks/roster.py): hold the shard's lease (one write when taken
or renewed, none while held: reconciliation/acks/shard_lease.py); read the due pledges
consistently, a hundred a round trip; and hand each delivery to its endpoint's gate
(reconciliation/acks/gates.py), which runs it now on the dispatcher's pool of workers,
queues it behind the endpoint's own requests in flight, or defers it (no attempt spent).
A pass does not wait for its sends: the next one leaves out the pledges still in flight,
so one slow endpoint never holds back another's deliveries.

A pledge is recorded once, after every one of its sends ended, by the worker that ended
the last (so never by two threads at once), fenced on the pledge as read: delivered, or
due again after the backoff, or given up after the last attempt. A dispatcher that dies
mid-pool leaves its pledges due; the next one takes the shard's lease when it runs out
and sends again, with the same ``webhook-id``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict, Unpack

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.acks.addresses import Resolver, system_resolver
from reconciliation.acks.attempts import Sender, attempt_make, delivery_after
from reconciliation.acks.events import body_bytes, event_payload
from reconciliation.acks.gates import BreakerChange, BreakerRules, Gates, Offered, Ticket
from reconciliation.acks.jobs import Job, job_take
from reconciliation.acks.models import (
    AckState,
    Attempt,
    Delivery,
    DeliveryStatus,
    Endpoint,
    EventType,
    event_id,
)
from reconciliation.acks.repository import AckRepository, LeaseLost
from reconciliation.acks.roster import Roster, fair_share
from reconciliation.acks.send import KeepAlive
from reconciliation.acks.shard_lease import DispatcherStopping, ShardLeaseHeld, ShardLeases
from reconciliation.acks.undelivered import ack_undelivered_open
from reconciliation.dynamo.errors import log_fields
from reconciliation.stores import Store

logger = logging.getLogger(__name__)

EndpointsFor = Callable[[str], list[Endpoint]]
# Told of each attempt once it is made (the endpoint's counters: its failure rate and
# last success, on the Acknowledgements page).
AttemptCounter = Callable[[Attempt], None]


# Told of the attempts made since it was last told, in order (one call for many: the
# edge counts them in one write per endpoint instead of one per attempt).
AttemptsCounter = Callable[[list[Attempt]], None]


# Told when an endpoint's circuit breaker moves (the Acknowledgements page shows it).
BreakerWatcher = Callable[[BreakerChange], None]


def _count_nothing(attempt: Attempt) -> None:
    return None


def _watch_nothing(change: BreakerChange) -> None:
    return None


def _owns_every(intent_id: str) -> bool:
    return True


class DispatcherOptions(TypedDict, total=False):
    """What a :class:`Dispatcher` may be given besides its store, endpoints and leases;
    each one left out has the default noted."""

    # Keeps the dispatcher to its fair share of the shards (none: every shard it can take).
    roster: Roster | None
    # The pool's size (none: ``ACK_WORKERS``; ``0``: every send in the caller's thread,
    # one at a time).
    workers: int | None
    # The endpoints' gates, kept from one pass to the next (their breakers); none: new ones.
    gates: Gates | None
    rng: random.Random | None  # the retries' jitter (none: a fresh generator)
    resolve: Resolver  # an endpoint's host to its addresses (the system's resolver)
    sender: Sender | None  # the POST (none: the dispatcher's kept-alive connections)
    owns: Callable[[str], bool]  # whether an intent is this dispatcher's to send (all)
    on_attempt: AttemptCounter  # (nothing)
    # Told of the attempts in runs (between two breaker moves), instead of on_attempt.
    on_attempts: AttemptsCounter | None
    on_breaker: BreakerWatcher  # (nothing)


@dataclass
class DispatchReport:
    leased: int = 0  # pledges taken under a shard lease
    delivered: int = 0
    failed: int = 0
    gave_up: int = 0
    lease_lost: int = 0
    settled: int = 0
    shards_busy: int = 0  # shards with pledges due whose lease another dispatcher holds
    deferred: int = 0  # deliveries put off by their endpoint's gate, no attempt spent
    errors: list[str] = field(default_factory=list)
    # Per endpoint id: whether any attempt this pass was answered 2xx (the edge disables
    # an endpoint that answered none for a day).
    answered: dict[str, bool] = field(default_factory=dict)

    def line(self) -> str:
        return (
            f"dispatch_acks: {self.delivered} delivered, {self.failed} failed (retry "
            f"scheduled), {self.gave_up} given up, {self.settled} pledges settled, "
            f"{self.lease_lost} leases lost, {self.shards_busy} shards held by another "
            f"dispatcher, {self.deferred} deferred by their endpoint"
        )


class InlineExecutor(Executor):
    """Runs each task in the caller's thread, at once: a dispatcher that sends one
    delivery at a time (the fault explorer's hands, whose every call must be a point of
    their own thread's schedule). A ``BaseException`` that is no ``Exception`` (a test's
    "the process dies here") goes on up, as it would in a process that dies."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - kept in the future, as a pool does
            future.set_exception(exc)
        return future


class _Send:
    """One delivery of a job, as its endpoint's gate holds it until it may run."""

    def __init__(self, dispatcher: Dispatcher, job: Job, key: str):
        self.dispatcher, self.job, self.key = dispatcher, job, key

    def __call__(self, ticket: Ticket) -> None:
        self.dispatcher._send(self.job, self.key, ticket)

    def defer(self, until: float) -> None:
        self.dispatcher._end(self.job, self.key, deferred_until=until)


class Dispatcher:
    """One dispatcher's sending, kept across its passes: the workers, the endpoints'
    gates and kept-alive connections, the pledges in flight and what ended since the
    last :meth:`take_report`. ``options``: :class:`DispatcherOptions`."""

    def __init__(
        self,
        store: Store,
        *,
        endpoints_for: EndpointsFor,
        leases: ShardLeases,
        **options: Unpack[DispatcherOptions],
    ):
        self.repository = AckRepository(store)
        self.endpoints_for = endpoints_for
        self.leases = leases
        self.roster = options.get("roster")
        workers = options.get("workers")
        size = settings.ACK_WORKERS if workers is None else workers
        self.pool: Executor = ThreadPoolExecutor(size, "ack-send") if size else InlineExecutor()
        self.gates = options.get("gates") or Gates(
            BreakerRules(
                failures_to_open=settings.ACK_BREAKER_FAILURES,
                open_s=settings.ACK_BREAKER_OPEN_S,
            )
        )
        self.rng = options.get("rng") or random.Random()
        self.rng_lock = threading.Lock()
        self.resolve = options.get("resolve", system_resolver)
        sender = options.get("sender")
        self.keep_alive = KeepAlive() if sender is None else None
        self.sender: Sender = sender or self.keep_alive  # type: ignore[assignment]
        self.owns = options.get("owns", _owns_every)
        self.on_attempt = options.get("on_attempt", _count_nothing)
        self.on_attempts = options.get("on_attempts") or self._each_attempt
        self.on_breaker = options.get("on_breaker", _watch_nothing)
        self.lock = threading.Condition()
        self.in_flight: set[str] = set()
        self.busy: Counter[str] = Counter()  # jobs in flight per shard
        # Pledges taken that ended (recorded, or left due), ever: a pass's progress is
        # counted from before it, so pledges ending while it starts the rest count too.
        self.ended = 0
        self.report = DispatchReport()
        # Attempts and breaker moves, told to the edge in the thread that drives the
        # dispatcher (:meth:`tell`), never in a worker: the edge writes them to its own
        # database, whose connections (and a test's transaction) belong to that thread.
        self.untold: deque[Attempt | BreakerChange] = deque()

    # --- a pass ------------------------------------------------------------------------

    def run_pass(self, shards: Iterable[str] | None = None) -> int:
        """Start sending every delivery due now in ``shards`` (all by default) that this
        dispatcher may take; returns how many pledges it took. Does not wait for them."""
        self.tell()
        taken = self._lease_due(shards)
        if not taken:
            return 0
        try:
            states = self.repository.get_many(list(taken))
        except (BotoCoreError, ClientError) as exc:
            self._error("due pledges", exc)
            return 0
        endpoints: dict[str, dict[str, Endpoint]] = {}
        started = 0
        for state in states:
            if state.tenant not in endpoints:
                found = self.endpoints_for(state.tenant)
                endpoints[state.tenant] = {e.endpoint_id: e for e in found}
            started += self._start(state, taken[state.intent_id], endpoints[state.tenant])
        return started

    def _lease_due(self, shards: Iterable[str] | None) -> dict[str, str]:
        """The pledges due (and the shard of each) in the shards of our share whose
        lease this dispatcher now holds."""
        every = self.repository.shards()
        share = fair_share(len(every), self.roster.live_count()) if self.roster else len(every)
        leaving = self._over_share(share)
        taken: dict[str, str] = {}
        for shard in self._in_order(every if shards is None else shards):
            if self.leases.closed:
                break  # asked to stop: no other send starts
            try:
                due = self._shard_due(shard, share=share, leaving=leaving)
            except DispatcherStopping:
                break
            taken.update(dict.fromkeys(due, shard))
        return taken

    def _shard_due(self, shard: str, *, share: int, leaving: set[str]) -> list[str]:
        """The pledges due in ``shard``, its lease held; none when it is not ours to take
        now. Raises :class:`DispatcherStopping` when asked to stop."""
        if shard in leaving:
            return []
        if self.leases.held_by_other(shard):
            self._count(shards_busy=1)
            return []
        if not self.leases.holding(shard) and len(self.leases.active()) >= share:
            return []  # another dispatcher's share
        due = self.repository.due(shard, now=clock.epoch(), skip=self._skipped)
        if not due:
            return []  # no lease taken for an idle shard
        try:
            self.leases.hold(shard)
        except DispatcherStopping:
            raise
        except ShardLeaseHeld:
            self._count(shards_busy=1)
            return []
        except (BotoCoreError, ClientError) as exc:
            # The shard stays due; the next pass tries again.
            self._error(f"{shard}", exc)
            return []
        return due

    def _skipped(self, intent_id: str) -> bool:
        with self.lock:
            return intent_id in self.in_flight or not self.owns(intent_id)

    def _in_order(self, shards: Iterable[str]) -> list[str]:
        """Held shards first (no take needed), then from a place of our own in the ring,
        so dispatchers starting together ask for different shards first."""
        ring = sorted(shards)
        if not ring:
            return []
        turn = hash(self.leases.owner) % len(ring)
        ring = ring[turn:] + ring[:turn]
        return sorted(ring, key=lambda s: not self.leases.holding(s))

    def _over_share(self, share: int) -> set[str]:
        """The leases held beyond ``share`` (a dispatcher started since): taken no new
        pledge from, and given back once nothing of theirs is in flight."""
        held = self.leases.active()
        if len(held) <= share:
            return set()
        with self.lock:
            # The idlest go first: their leases can be given back now.
            ordered = sorted(held, key=lambda s: self.busy[s])
            leaving = set(ordered[: len(held) - share])
            idle = [s for s in leaving if not self.busy[s]]
        for shard in idle:
            self.leases.let_go(shard)
        return leaving

    def _start(self, state: AckState, shard: str, by_id: dict[str, Endpoint]) -> int:
        now = clock.epoch()
        if not state.due or (state.due_at or 0) > now:
            return 0
        self._count(leased=1)
        job, sends = job_take(state, shard, by_id, now=now)
        if not sends:
            try:
                self._record(job)
            finally:
                with self.lock:
                    self.ended += 1
            return 1
        with self.lock:
            self.in_flight.add(state.intent_id)
            self.busy[shard] += 1
        for key in sends:
            self._offer(job, key)
        return 1

    def _offer(self, job: Job, key: str) -> None:
        endpoint = job.endpoints[job.deliveries[key].endpoint_id]
        send = _Send(self, job, key)
        paused = endpoint.paused_until.timestamp() if endpoint.paused_until else None
        offer, change = self.gates.of(endpoint).offer(
            send, now=clock.now().timestamp(), paused_until=paused
        )
        self._breaker(change)
        if offer.outcome == Offered.RUN:
            assert offer.ticket is not None
            self.pool.submit(send, offer.ticket)
        elif offer.outcome == Offered.DEFERRED:
            send.defer(offer.until)

    # --- one send, in a worker -----------------------------------------------------------

    def _send(self, job: Job, key: str, ticket: Ticket) -> None:
        delivery = job.deliveries[key]
        endpoint = job.endpoints[delivery.endpoint_id]
        gate = self.gates.of(endpoint)
        ok: bool | None = None
        try:
            if job.stopped is None:
                wait = gate.token_wait(now=clock.now().timestamp())
                if wait:
                    time.sleep(wait)  # holding one of the endpoint's slots, not another's
                ok = self._post(job, key, delivery, endpoint)
        except Exception as exc:  # noqa: BLE001 - one pledge's failure stays its own
            logger.warning("acknowledgement of %s not sent: %r", job.state.intent_id, exc)
            job.broken = True
            self._count(errors=[f"{job.state.intent_id}: {type(exc).__name__}"])
        # Not in a ``finally``: a dispatcher that dies mid-send (a test's BaseException in
        # the inline executor) records nothing, as a killed process would not.
        finished = gate.finish(ticket, ok=ok, now=clock.now().timestamp())
        self._breaker(finished.change)
        for queued, next_ticket in finished.start:
            self.pool.submit(queued, next_ticket)
        for queued in finished.deferred:
            queued.defer(finished.deferred_until)
        self._end(job, key)

    def _post(self, job: Job, key: str, delivery: Delivery, endpoint: Endpoint) -> bool | None:
        """Send one delivery, unless the shard's lease would not outlast it: whether it
        was answered 2xx, or ``None`` when it was not sent."""
        # No POST starts unless the shard's lease outlasts it (renewed if need be), so
        # no other dispatcher sends this pledge while this one may still be sending.
        try:
            self.leases.hold(job.shard)
        except ShardLeaseHeld as exc:
            # Asked to stop, or overtaken: the answers had are recorded (or the next
            # dispatcher would send them again); the record is fenced on the pledge as
            # read, so it never writes over a successor's.
            job.stopped = exc
            return None
        state = job.state
        with job.lock:
            job.attempted = True
        payload = body_bytes(event_payload(state, delivery.event_type))
        message_id = event_id(state.intent_id, delivery.event_type)
        at = clock.now()
        result = attempt_make(
            endpoint, message_id, payload, resolve=self.resolve, sender=self.sender
        )
        self.untold.append(
            Attempt(
                endpoint,
                state.intent_id,
                EventType.read(delivery.event_type),
                message_id,
                at,
                result,
            )
        )
        with self.rng_lock:
            done = delivery_after(delivery, result, rng=self.rng)
        with self.lock:
            self.report.answered[delivery.endpoint_id] = (
                self.report.answered.get(delivery.endpoint_id) or result.ok
            )
            self.report.delivered += done.status == DeliveryStatus.DELIVERED
            self.report.gave_up += done.status == DeliveryStatus.GAVE_UP
            self.report.failed += done.status == DeliveryStatus.PENDING
        if done.status == DeliveryStatus.GAVE_UP:
            # Its case before the record: a dispatcher dying in between leaves the pledge
            # due, and its successor's give-up finds the case there (its id is stable).
            ack_undelivered_open(self.repository.store, state, done)
        with job.lock:
            job.deliveries[key] = done
        return result.ok

    def _end(self, job: Job, key: str, deferred_until: float | None = None) -> None:
        with job.lock:
            if deferred_until is not None:
                delivery = job.deliveries[key]
                next_at = max(clock.epoch() + 1, math.ceil(deferred_until))
                job.deliveries[key] = replace(delivery, next_at=next_at)
            job.left -= 1
            last = job.left == 0
        if deferred_until is not None:
            self._count(deferred=1)
        if not last:
            return
        try:
            self._record(job)
        finally:
            with self.lock:
                self.in_flight.discard(job.state.intent_id)
                self.busy[job.shard] -= 1
                self.ended += 1
                self.lock.notify_all()

    def _record(self, job: Job) -> None:
        stopped = job.stopped
        if stopped is not None and not isinstance(stopped, DispatcherStopping):
            self._count(lease_lost=1)  # overtaken: the successor sends the rest
        if job.broken or (stopped is not None and not job.attempted):
            return  # nothing sent, or a failure of ours: it stays due as it was
        next_due = job.next_due(clock.epoch())
        try:
            self.repository.record(
                job.state.intent_id,
                fence=job.state.fence,
                status=job.state.pledge.status,
                deliveries=job.deliveries,
                next_due=next_due,
            )
        except LeaseLost:
            self._count(lease_lost=1)
            return
        except (BotoCoreError, ClientError) as exc:
            # The pledge stays due; the next pass tries again.
            self._error(job.state.intent_id, exc)
            return
        if next_due is None:
            self._count(settled=1)

    # --- bookkeeping ---------------------------------------------------------------------

    def _breaker(self, change: BreakerChange | None) -> None:
        if change is not None:
            self.untold.append(change)

    def tell(self) -> None:
        """Tell the edge of each attempt made (once each, in order) and each breaker
        move since the last call. Called by the thread that drives the dispatcher: at
        every pass, :meth:`take_report` and :meth:`close`."""
        attempts: list[Attempt] = []
        while self.untold:
            told = self.untold.popleft()
            if isinstance(told, Attempt):
                attempts.append(told)
                continue
            # A breaker's move after the attempts before it, as they happened.
            if attempts:
                self.on_attempts(attempts)
                attempts = []
            self.on_breaker(told)
        if attempts:
            self.on_attempts(attempts)

    def _each_attempt(self, attempts: list[Attempt]) -> None:
        for attempt in attempts:
            self.on_attempt(attempt)

    def _count(self, errors: list[str] | None = None, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self.report, name, getattr(self.report, name) + n)
            self.report.errors += errors or []

    def _error(self, what: str, exc: BaseException) -> None:
        logger.warning(
            "acknowledgements of %s not dispatched: %s", what, exc, extra=log_fields(exc)
        )
        self._count(errors=[f"{what}: {type(exc).__name__}"])

    def pending(self) -> int:
        with self.lock:
            return len(self.in_flight)

    def finished(self) -> int:
        """How many of the pledges this dispatcher took have ended, since it started."""
        with self.lock:
            return self.ended

    def wait(self, timeout: float | None = None) -> bool:
        """Until no pledge is in flight (or ``timeout``): whether none is."""
        with self.lock:
            return self.lock.wait_for(lambda: not self.in_flight, timeout=timeout)

    def take_report(self) -> DispatchReport:
        """What ended since the last call (and the passes' counts), starting afresh."""
        self.tell()
        with self.lock:
            report, self.report = self.report, DispatchReport()
            return report

    def close(self) -> None:
        """Wait for the sends under way, then end the workers and the connections."""
        self.wait()
        self.pool.shutdown(wait=True)
        self.tell()
        if self.keep_alive is not None:
            self.keep_alive.close()


def acks_dispatch_once(
    store: Store,
    *,
    endpoints_for: EndpointsFor,
    leases: ShardLeases | None = None,
    **options: Unpack[DispatcherOptions],
) -> DispatchReport:
    """Deliver every acknowledgement due now, once each, and return what happened: one
    pass of a :class:`Dispatcher`, waited for to its end.

    ``leases`` are the shard leases of this dispatcher, kept from one pass to the next
    (``dispatch_acks`` passes its own); without them the pass is a dispatcher of its own,
    which releases the leases it took when it is done (not when it dies mid-pass).
    With several regions every replica of a pledge is in its region's ``acks_due``;
    ``owns`` keeps the pledges whose key is homed in ``store``'s region, so only one
    region's dispatcher (whose shard leases are that region's items) sends them. The
    other ``options`` are the :class:`Dispatcher`'s (:class:`DispatcherOptions`)."""
    own = leases is None
    leases = leases or ShardLeases(store)
    dispatcher = Dispatcher(store, endpoints_for=endpoints_for, leases=leases, **options)
    try:
        dispatcher.run_pass()
    except Exception:
        dispatcher.close()  # what was started ends before the error goes on up
        raise
    # Not on a BaseException that is no Exception: a test's "the process dies here"
    # leaves its leases and sends as a killed process would.
    dispatcher.close()
    if own:
        leases.release()
    return dispatcher.take_report()
