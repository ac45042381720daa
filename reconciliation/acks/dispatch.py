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

import json
import logging
import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.acks.addresses import Resolver, UrlRefused, system_resolver, url_check
from reconciliation.acks.gates import BreakerChange, BreakerRules, Gates, Offered, Ticket
from reconciliation.acks.models import (
    PAYLOAD_VERSION,
    AckState,
    Attempt,
    AttemptResult,
    Delivery,
    DeliveryStatus,
    Endpoint,
    EventType,
    delivery_key,
    event_id,
)
from reconciliation.acks.repository import AckRepository, LeaseLost
from reconciliation.acks.roster import Roster, fair_share
from reconciliation.acks.schedule import retry_delay_s
from reconciliation.acks.send import KeepAlive, signed_headers
from reconciliation.acks.shard_lease import DispatcherStopping, ShardLeaseHeld, ShardLeases
from reconciliation.acks.undelivered import ack_undelivered_open
from reconciliation.claims.models import PledgeStatus
from reconciliation.dynamo.errors import log_fields
from reconciliation.stores import Store

logger = logging.getLogger(__name__)

# A delivery to an endpoint disabled or removed since is looked at again this much later.
PAUSED_RECHECK_S = 3600

EndpointsFor = Callable[[str], list[Endpoint]]
Sender = Callable[..., AttemptResult]
# Told of each attempt once it is made (the endpoint's counters: its failure rate and
# last success, on the Acknowledgements page).
AttemptCounter = Callable[[Attempt], None]


# Told when an endpoint's circuit breaker moves (the Acknowledgements page shows it).
BreakerWatcher = Callable[[BreakerChange], None]


def _count_nothing(attempt: Attempt) -> None:
    return None


def _watch_nothing(change: BreakerChange) -> None:
    return None


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


def events_of(state: AckState) -> list[EventType]:
    events = [EventType.PLEDGE_RECORDED]
    if state.pledge.status == PledgeStatus.VOIDED:
        events.append(EventType.PLEDGE_VOIDED)
    return events


def event_payload(state: AckState, event_type: str) -> dict[str, Any]:
    """The event body: ``type`` and ``version``, then the pledge as recorded (and when it
    was voided, for ``pledge.voided``)."""
    body = state.pledge.api_body()
    extra = {"voided_at": state.pledge.voided_at} if event_type == EventType.PLEDGE_VOIDED else {}
    return {
        "type": event_type,
        "version": PAYLOAD_VERSION,
        "timestamp": state.pledge.created_at,
        "data": {
            "intent_id": body["intent_id"],
            "tenant": state.pledge.tenant,
            "fund": body["fund"],
            "amount": body["amount"],
            "currency": body["currency"],
            "donor_ref": body["donor_ref"],
            "recorded_at": state.pledge.created_at,
            "case_id": state.case_id,
            **extra,
        },
    }


def body_bytes(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


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


@dataclass
class _Job:
    """One pledge in flight: its deliveries as they stand and the sends not yet ended.
    Changed only under ``lock``; recorded by whoever ends its last send."""

    state: AckState
    shard: str
    deliveries: dict[str, Delivery]
    endpoints: dict[str, Endpoint]
    left: int = 0
    attempted: bool = False
    stopped: ShardLeaseHeld | None = None
    broken: bool = False  # a send failed on our side: nothing is recorded, it stays due
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class _Send:
    """One delivery of a job, as its endpoint's gate holds it until it may run."""

    def __init__(self, dispatcher: Dispatcher, job: _Job, key: str):
        self.dispatcher, self.job, self.key = dispatcher, job, key

    def __call__(self, ticket: Ticket) -> None:
        self.dispatcher._send(self.job, self.key, ticket)

    def defer(self, until: float) -> None:
        self.dispatcher._end(self.job, self.key, deferred_until=until)


class Dispatcher:
    """One dispatcher's sending, kept across its passes: the workers, the endpoints'
    gates and kept-alive connections, the pledges in flight and what ended since the
    last :meth:`take_report`.

    ``workers`` is the pool's size (``0``: every send in the caller's thread, one at a
    time). ``roster``, when given, keeps the dispatcher to its fair share of the shards."""

    def __init__(
        self,
        store: Store,
        *,
        endpoints_for: EndpointsFor,
        leases: ShardLeases,
        roster: Roster | None = None,
        workers: int | None = None,
        gates: Gates | None = None,
        rng: random.Random | None = None,
        resolve: Resolver = system_resolver,
        sender: Sender | None = None,
        owns: Callable[[str], bool] = lambda intent_id: True,
        on_attempt: AttemptCounter = _count_nothing,
        on_breaker: BreakerWatcher = _watch_nothing,
    ):
        self.repository = AckRepository(store)
        self.endpoints_for = endpoints_for
        self.leases = leases
        self.roster = roster
        size = settings.ACK_WORKERS if workers is None else workers
        self.pool: Executor = ThreadPoolExecutor(size, "ack-send") if size else InlineExecutor()
        self.gates = gates or Gates(
            BreakerRules(
                failures_to_open=settings.ACK_BREAKER_FAILURES,
                open_s=settings.ACK_BREAKER_OPEN_S,
            )
        )
        self.rng = rng or random.Random()
        self.rng_lock = threading.Lock()
        self.resolve = resolve
        self.keep_alive = KeepAlive() if sender is None else None
        self.sender: Sender = sender or self.keep_alive  # type: ignore[assignment]
        self.owns = owns
        self.on_attempt = on_attempt
        self.on_breaker = on_breaker
        self.lock = threading.Condition()
        self.in_flight: set[str] = set()
        self.busy: Counter[str] = Counter()  # jobs in flight per shard
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
        every = self.repository.shards()
        share = fair_share(len(every), self.roster.live_count()) if self.roster else len(every)
        leaving = self._over_share(share)
        taken: dict[str, str] = {}
        for shard in self._in_order(every if shards is None else shards):
            if self.leases.closed:
                break  # asked to stop: no other send starts
            if shard in leaving:
                continue
            if self.leases.held_by_other(shard):
                self._count(shards_busy=1)
                continue
            if not self.leases.holding(shard) and len(self.leases.active()) >= share:
                continue  # another dispatcher's share
            now = clock.epoch()
            due = self.repository.due(shard, now=now, skip=self._skipped)
            if not due:
                continue  # no lease taken for an idle shard
            try:
                self.leases.hold(shard)
            except DispatcherStopping:
                break
            except ShardLeaseHeld:
                self._count(shards_busy=1)
                continue
            except (BotoCoreError, ClientError) as exc:
                # The shard stays due; the next pass tries again.
                self._error(f"{shard}", exc)
                continue
            taken.update(dict.fromkeys(due, shard))
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
        deliveries = dict(state.deliveries)
        # The events the pledge has had: recorded, and voided once an override voided it.
        # Endpoints subscribed now and not yet part of an event's deliveries join it.
        for event_type in events_of(state):
            for subscribed in by_id.values():
                key = delivery_key(subscribed.endpoint_id, event_type)
                if subscribed.wants(event_type) and key not in deliveries:
                    deliveries[key] = Delivery(subscribed.endpoint_id, subscribed.url, event_type)
        sends = []
        for key, delivery in deliveries.items():
            if delivery.settled or delivery.next_at > now:
                continue
            endpoint = by_id.get(delivery.endpoint_id)
            if endpoint is None or not endpoint.enabled:
                # Removed or disabled: no attempt is spent; looked at again later, so the
                # pledge is not taken on every pass meanwhile.
                deliveries[key] = replace(delivery, next_at=now + PAUSED_RECHECK_S)
                continue
            sends.append(key)
        job = _Job(state, shard, deliveries, by_id, left=len(sends))
        if not sends:
            self._record(job)
            return 1
        with self.lock:
            self.in_flight.add(state.intent_id)
            self.busy[shard] += 1
        for key in sends:
            self._offer(job, key)
        return 1

    def _offer(self, job: _Job, key: str) -> None:
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

    def _send(self, job: _Job, key: str, ticket: Ticket) -> None:
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

    def _post(self, job: _Job, key: str, delivery: Delivery, endpoint: Endpoint) -> bool | None:
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
        result = _attempt(endpoint, message_id, payload, resolve=self.resolve, sender=self.sender)
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
            done = _after(delivery, result, rng=self.rng)
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

    def _end(self, job: _Job, key: str, deferred_until: float | None = None) -> None:
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
                self.lock.notify_all()

    def _record(self, job: _Job) -> None:
        stopped = job.stopped
        if stopped is not None and not isinstance(stopped, DispatcherStopping):
            self._count(lease_lost=1)  # overtaken: the successor sends the rest
        if job.broken or (stopped is not None and not job.attempted):
            return  # nothing sent, or a failure of ours: it stays due as it was
        pending = [d.next_at for d in job.deliveries.values() if not d.settled]
        next_due = max(min(pending), clock.epoch() + 1) if pending else None
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
        while self.untold:
            told = self.untold.popleft()
            if isinstance(told, Attempt):
                self.on_attempt(told)
            else:
                self.on_breaker(told)

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
    rng: random.Random | None = None,
    resolve: Resolver = system_resolver,
    sender: Sender | None = None,
    owns: Callable[[str], bool] = lambda intent_id: True,
    on_attempt: AttemptCounter = _count_nothing,
    on_breaker: BreakerWatcher = _watch_nothing,
    leases: ShardLeases | None = None,
    workers: int | None = None,
    gates: Gates | None = None,
) -> DispatchReport:
    """Deliver every acknowledgement due now, once each, and return what happened: one
    pass of a :class:`Dispatcher`, waited for to its end.

    ``leases`` are the shard leases of this dispatcher, kept from one pass to the next
    (``dispatch_acks`` passes its own); without them the pass is a dispatcher of its own,
    which releases the leases it took when it is done (not when it dies mid-pass).
    With several regions every replica of a pledge is in its region's ``acks_due``;
    ``owns`` keeps the pledges whose key is homed in ``store``'s region, so only one
    region's dispatcher (whose shard leases are that region's items) sends them.
    ``workers``: the pool's size (``ACK_WORKERS``; ``0`` sends one at a time in the
    caller's thread). ``gates``: the endpoints' gates, kept from one pass to the next
    (their breakers), or new ones."""
    own = leases is None
    leases = leases or ShardLeases(store)
    dispatcher = Dispatcher(
        store,
        endpoints_for=endpoints_for,
        leases=leases,
        workers=workers,
        gates=gates,
        rng=rng,
        resolve=resolve,
        sender=sender,
        owns=owns,
        on_attempt=on_attempt,
        on_breaker=on_breaker,
    )
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


def _attempt(
    endpoint: Endpoint, message_id: str, payload: bytes, *, resolve: Resolver, sender: Sender
) -> AttemptResult:
    try:
        # Checked again now: the name may resolve elsewhere than at registration.
        target = url_check(
            endpoint.url, allow_loopback=settings.WEBHOOK_ALLOW_LOOPBACK, resolve=resolve
        )
    except UrlRefused as exc:
        return AttemptResult(None, f"refused: {exc}")
    at: datetime = clock.now()
    headers = signed_headers(
        secret=endpoint.secret,
        previous_secret=endpoint.previous_secret_at(at),
        event_id=message_id,
        at=at,
        body=payload,
    )
    result = sender(
        target,
        headers=headers,
        body=payload,
        connect_timeout_s=settings.ACK_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.ACK_READ_TIMEOUT_S,
    )
    return replace(result, signature=headers["webhook-signature"])


def _after(delivery: Delivery, result: AttemptResult, *, rng: random.Random) -> Delivery:
    attempts = delivery.attempts + 1
    done = replace(
        delivery,
        attempts=attempts,
        last_code=result.code,
        last_error=result.error[:200],
        last_at=clock.iso(clock.now()),
        last_signature=result.signature,
    )
    if result.ok:
        return replace(done, status=DeliveryStatus.DELIVERED, next_at=0)
    delay = retry_delay_s(attempts, rng, scale=settings.ACK_RETRY_SCALE)
    if delay is None:
        return replace(done, status=DeliveryStatus.GAVE_UP, next_at=0)
    return replace(done, next_at=clock.epoch() + delay)
