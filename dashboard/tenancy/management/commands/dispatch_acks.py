"""``manage.py dispatch_acks [--once]`` (docs/webhooks.md): deliver the acknowledgements
that are due, in the foreground; ``--once`` delivers what is due now and exits.

Running, it keeps one :class:`~reconciliation.acks.dispatch.Dispatcher` per region (its
workers, gates and kept-alive connections), starts a pass whenever a commit's wake-up
names a shard (reconciliation/acks/wakeup.py) and over every shard each ``ACK_POLL_S``,
and keeps its heartbeat in the region's roster, so several dispatchers share the shards
(reconciliation/acks/roster.py).

Asked to stop (SIGTERM, as a process manager or a deploy does; SIGINT, Ctrl-C), it ends
the sends under way, starts no other, gives back its shard leases, leaves the roster
and exits 0: the next
dispatcher sends at once instead of waiting ``ACK_LEASE_S`` for them to run out. A
dispatcher killed (SIGKILL, a crash) leaves them to run out.

The endpoints are the tenants' ``WebhookEndpoint`` rows, read here (the edge) and passed
down as plain data; the pledges that are due, their shards' leases and the attempts are in DynamoDB.
Each attempt is also counted on its endpoint and logged (``DeliveryAttempt``) here.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from dashboard.tenancy.delivery_log import attempts_log
from dashboard.tenancy.models import WebhookEndpoint
from dashboard.tenancy.tenant_changes import endpoints_watch
from reconciliation.acks.dispatch import Dispatcher, DispatchReport
from reconciliation.acks.gates import BreakerChange
from reconciliation.acks.models import Attempt, Endpoint
from reconciliation.acks.roster import Roster
from reconciliation.acks.shard_lease import ShardLeases
from reconciliation.acks.wakeup import STOP_LOOK_S, Wake, Wakeups
from reconciliation.actors import system_actor
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.dynamo.client import home_region
from reconciliation.stores import Store, every_store

logger = logging.getLogger(__name__)


def homed_in(store: Store) -> Callable[[str], bool]:
    """Whether an intent's key is homed in ``store``'s region (docs/regions.md)."""

    def owns(intent_id: str) -> bool:
        tenant, _, key = intent_id.partition("#")
        return home_region(claim_pk(tenant, OPERATION_CREATE_PLEDGE, key)).name == store.region_name

    return owns


def attempt_counted(attempt: Attempt) -> None:
    """The endpoint's counters (the Acknowledgements page), one UPDATE; a database that
    refuses it costs a count, never the delivery (recorded in DynamoDB regardless)."""
    try:
        WebhookEndpoint.attempt_count(
            attempt.endpoint.endpoint_id, ok=attempt.result.ok, at=attempt.at
        )
    except DatabaseError as exc:
        logger.warning("attempt to %s not counted: %s", attempt.endpoint.endpoint_id, exc)


def attempt_recorded(attempt: Attempt) -> None:
    """What the edge keeps of each attempt: the endpoint's counters and a row of its
    attempt log (dashboard/tenancy/delivery_log.py), each failing alone and costing no delivery."""
    attempts_recorded([attempt])


def attempts_recorded(attempts: list[Attempt]) -> None:
    """:func:`attempt_recorded` for a dispatcher's run of attempts: one UPDATE per
    endpoint and one INSERT, not two statements an attempt (the ORM's building of the
    counters' UPDATE alone cost more of the dispatcher's CPU than the delivery)."""
    by_endpoint: dict[str, list[tuple[bool, datetime]]] = {}
    for attempt in attempts:
        by_endpoint.setdefault(attempt.endpoint.endpoint_id, []).append(
            (attempt.result.ok, attempt.at)
        )
    for endpoint_id, counted in by_endpoint.items():
        try:
            WebhookEndpoint.attempts_count(endpoint_id, counted)
        except DatabaseError as exc:
            logger.warning("attempts to %s not counted: %s", endpoint_id, exc)
    attempts_log(attempts)


def breaker_noted(change: BreakerChange) -> None:
    """The breaker's move on the endpoint's row (the page; the other dispatchers); a
    database that refuses it costs the display, never a delivery."""
    until = datetime.fromtimestamp(change.until, UTC) if change.until is not None else None
    try:
        WebhookEndpoint.breaker_note(
            change.endpoint_id, state=change.state, until=until, failures=change.failures
        )
    except DatabaseError as exc:
        logger.warning("breaker of %s not noted: %s", change.endpoint_id, exc)
    if change.until is not None:
        logger.warning(
            "acknowledgements to %s paused until %s: %s failed attempts in a row",
            change.endpoint_id,
            until,
            change.failures,
        )


def endpoints_for(tenant: str) -> list[Endpoint]:
    rows = WebhookEndpoint.objects.filter(tenant__name=tenant).select_related("tenant")
    return [row.as_endpoint() for row in rows]


class StopRequest:
    """A stop asked by SIGTERM or SIGINT: :meth:`ask` is the handler, the passes look
    at :attr:`asked` and sleep in :meth:`wait`.

    The handler only assigns. A Python signal handler runs in the main thread between
    two of its bytecodes, wherever it is: ``threading.Event.set`` there takes the lock
    that ``Event.wait`` holds for a few bytecodes of every poll, and would wait for
    itself forever, the leases kept until they run out."""

    def __init__(self, leases: Iterable[ShardLeases]):
        self.leases = list(leases)
        self.asked = False

    def ask(self, _signum: int, _frame: FrameType | None) -> None:
        self.asked = True
        for held in self.leases:
            held.close()  # the send under way ends; no other starts

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or until asked to stop: looked at every tenth of a second
        (a sleep a signal interrupts resumes, PEP 475, so it cannot end it sooner)."""
        deadline = time.monotonic() + seconds
        while not self.asked:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STOP_LOOK_S))


class Command(BaseCommand):
    help = "Deliver due acknowledgement webhooks (Standard Webhooks, signed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="deliver what is due now, exit")

    def handle(self, *args: Any, once: bool = False, **options: Any) -> None:
        # This dispatcher's shard leases, one set per region, kept from pass to pass: a
        # lease held costs no write until it is near its end (docs/capacity.md). Given
        # back when it stops (the end of --once, or asked to by a signal).
        stores = list(every_store())
        leases = {store.region_name: ShardLeases(store) for store in stores}
        rosters = {
            store.region_name: Roster(
                store, owner=leases[store.region_name].owner, ttl_s=settings.ACK_LEASE_S
            )
            for store in stores
        }
        dispatchers = {
            store.region_name: Dispatcher(
                store,
                endpoints_for=endpoints_for,
                leases=leases[store.region_name],
                # --once takes every shard it can: it runs alone, briefly.
                roster=None if once else rosters[store.region_name],
                owns=homed_in(store),
                on_attempts=attempts_recorded,
                on_breaker=breaker_noted,
            )
            for store in stores
        }
        stop = StopRequest(leases.values())
        with _signals_call(stop.ask, signal.SIGTERM, signal.SIGINT):
            try:
                self._passes(once=once, dispatchers=dispatchers, stop=stop)
            finally:
                for dispatcher in dispatchers.values():
                    dispatcher.close()  # the sends under way end; no other starts
                released = sum(held.release() for held in leases.values())
                if not once:
                    for roster in rosters.values():
                        roster.leave()
        if stop.asked:
            self.stdout.write(f"dispatch_acks: stopped; {released} shard leases released")

    def _passes(self, *, once: bool, dispatchers: dict[str, Dispatcher], stop: StopRequest) -> None:
        wakeups = None if once else Wakeups()
        wake = Wake(None)  # the first pass looks at every shard
        try:
            while not stop.asked:
                taken = 0
                ended = sum(d.finished() for d in dispatchers.values())
                for store in every_store():
                    if stop.asked:
                        return
                    taken += self._pass(dispatchers[store.region_name], wake, once=once)
                if once or wakeups is None:
                    return
                if taken:
                    # A backlog: pass again once half of this pass's pledges are done (a
                    # pass takes at most 100 a shard) or a commit wakes it, not at the poll.
                    wake = self._room(
                        dispatchers.values(),
                        done=max(1, taken // 2),
                        since=ended,
                        stop=stop,
                        wakeups=wakeups,
                    )
                    continue
                wake = wakeups.wait(lambda: stop.asked)
        finally:
            if wakeups is not None:
                wakeups.close()

    def _pass(self, dispatcher: Dispatcher, wake: Wake, *, once: bool) -> int:
        try:
            taken = dispatcher.run_pass(wake.shards)
        except (BotoCoreError, ClientError) as exc:
            # DynamoDB unreachable: nothing was settled, every due pledge stays due.
            if once:
                raise CommandError(f"DynamoDB could not be read: {exc}") from exc
            logger.warning("dispatch_acks pass failed: %s", exc)
            return 0
        if once:
            dispatcher.wait()
        self._report(dispatcher.take_report(), once=once)
        return taken

    @staticmethod
    def _room(
        dispatchers: Iterable[Progress],
        *,
        done: int,
        since: int,
        stop: StopRequest,
        wakeups: Woken,
    ) -> Wake:
        """Until ``done`` pledges have ended since the dispatchers had ended ``since``
        (counted before the pass began), or a commit wakes the dispatcher, the poll
        interval at most, looking for a stop every tenth of a second: what the next pass
        looks at. Progress, not an emptier pool: a hanging endpoint's pledges stay in
        flight through its timeouts, and waiting for the pool to fall under a count held
        every other tenant's next pass to the poll. Counted from before the pass, not
        after it: a pass that starts hundreds of sends sees many end before it returns,
        and counting from its end left a dispatcher idle to the poll with pledges due."""
        pools = list(dispatchers)
        deadline = time.monotonic() + settings.ACK_POLL_S
        while not stop.asked and time.monotonic() < deadline:
            if sum(d.finished() for d in pools) - since >= done:
                break
            woken = wakeups.woken_within(STOP_LOOK_S)
            if woken is not None:
                return woken
        return Wake(None)

    def _report(self, report: DispatchReport, *, once: bool) -> None:
        for endpoint in endpoints_watch(report.answered, actor=system_actor()):
            self.stdout.write(f"disabled after a day of failures: {endpoint}")
        if once or report.leased or report.delivered or report.failed:
            self.stdout.write(report.line())


class Progress(Protocol):
    def finished(self) -> int: ...


class Woken(Protocol):
    def woken_within(self, timeout: float) -> Wake | None: ...


@contextlib.contextmanager
def _signals_call(
    handler: Callable[[int, FrameType | None], None], *signums: int
) -> Iterator[None]:
    """``signums`` call ``handler`` while inside, then what they called before (a test
    that runs the command in its own process keeps its own Ctrl-C). Signals reach the
    main thread only: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, previous in before.items():
            signal.signal(signum, previous)
