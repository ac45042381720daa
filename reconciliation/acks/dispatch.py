"""``dispatch_acks``: deliver the acknowledgements that are due (docs/webhooks.md).

Per shard of ``acks_due`` with pledges due: hold the shard's lease (one write when taken
or renewed, none while held: reconciliation/acks/shard_lease.py), and for each pledge
whose time has come read it consistently, POST the event to every subscribed endpoint
not yet answered, and record the attempts fenced on the pledge as read: delivered, or
due again after the backoff, or given up after the last attempt. A dispatcher that dies
mid-send leaves the pledge due; the next one takes the shard's lease when it runs out
and sends again, with the same ``webhook-id``.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.acks.addresses import Resolver, UrlRefused, system_resolver, url_check
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
from reconciliation.acks.schedule import retry_delay_s
from reconciliation.acks.send import post, signed_headers
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


def _count_nothing(attempt: Attempt) -> None:
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
    errors: list[str] = field(default_factory=list)
    # Per endpoint id: whether any attempt this pass was answered 2xx (the edge disables
    # an endpoint that answered none for a day).
    answered: dict[str, bool] = field(default_factory=dict)

    def line(self) -> str:
        return (
            f"dispatch_acks: {self.delivered} delivered, {self.failed} failed (retry "
            f"scheduled), {self.gave_up} given up, {self.settled} pledges settled, "
            f"{self.lease_lost} leases lost, {self.shards_busy} shards held by another "
            "dispatcher"
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


def acks_dispatch_once(
    store: Store,
    *,
    endpoints_for: EndpointsFor,
    rng: random.Random | None = None,
    resolve: Resolver = system_resolver,
    sender: Sender = post,
    owns: Callable[[str], bool] = lambda intent_id: True,
    on_attempt: AttemptCounter = _count_nothing,
    leases: ShardLeases | None = None,
) -> DispatchReport:
    """Deliver every acknowledgement due now, once each, and return what happened.

    ``leases`` are the shard leases of this dispatcher, kept from one pass to the next
    (``dispatch_acks`` passes its own); without them the pass is a dispatcher of its own,
    which releases the leases it took when it is done (not when it dies mid-pass).
    With several regions every replica of a pledge is in its region's ``acks_due``;
    ``owns`` keeps the pledges whose key is homed in ``store``'s region, so only one
    region's dispatcher (whose shard leases are that region's items) sends them."""
    report = DispatchReport()
    repository = AckRepository(store)
    own = leases is None
    leases = leases or ShardLeases(store)
    for shard in repository.shards():
        if leases.closed:
            break  # asked to stop: no other send starts
        due = [i for i in repository.due(shard, now=clock.epoch()) if owns(i)]
        if not due:
            continue  # no lease taken for an idle shard
        try:
            leases.hold(shard)
        except DispatcherStopping:
            break
        except ShardLeaseHeld:
            report.shards_busy += 1
            continue
        except (BotoCoreError, ClientError) as exc:
            # The shard stays due; the next pass tries again.
            logger.warning(
                "acknowledgements of shard %s not dispatched: %s", shard, exc, extra=log_fields(exc)
            )
            report.errors.append(f"{shard}: {type(exc).__name__}")
            continue
        for intent_id in due:
            try:
                _dispatch_one(
                    repository,
                    intent_id,
                    endpoints_for=endpoints_for,
                    rng=rng or random.Random(),
                    resolve=resolve,
                    sender=sender,
                    report=report,
                    on_attempt=on_attempt,
                    keep_lease=partial(leases.hold, shard),
                )
            except DispatcherStopping:
                break  # the send under way ended; the pledges left stay due
            except ShardLeaseHeld:
                # Taken over (we paused past the lease): the successor sends the rest.
                report.lease_lost += 1
                break
            except LeaseLost:
                report.lease_lost += 1
            except (BotoCoreError, ClientError) as exc:
                # The pledge stays due; the next pass tries again.
                logger.warning(
                    "acknowledgement of %s not dispatched: %s",
                    intent_id,
                    exc,
                    extra=log_fields(exc),
                )
                report.errors.append(f"{intent_id}: {type(exc).__name__}")
    if own:
        leases.release()
    return report


def _dispatch_one(
    repository: AckRepository,
    intent_id: str,
    *,
    endpoints_for: EndpointsFor,
    rng: random.Random,
    resolve: Resolver,
    sender: Sender,
    report: DispatchReport,
    on_attempt: AttemptCounter = _count_nothing,
    keep_lease: Callable[[], object] = lambda: None,
) -> None:
    state = repository.get(intent_id)
    now = clock.epoch()
    if state is None or not state.due or (state.due_at or 0) > now:
        return
    report.leased += 1
    deliveries = dict(state.deliveries)
    by_id = {e.endpoint_id: e for e in endpoints_for(state.tenant)}
    # The events the pledge has had: recorded, and voided once an override voided it.
    # Endpoints subscribed now and not yet part of an event's deliveries join it.
    for event_type in events_of(state):
        for subscribed in by_id.values():
            key = delivery_key(subscribed.endpoint_id, event_type)
            if subscribed.wants(event_type) and key not in deliveries:
                deliveries[key] = Delivery(subscribed.endpoint_id, subscribed.url, event_type)
    attempted = False
    stopped: ShardLeaseHeld | None = None
    for key, delivery in deliveries.items():
        if delivery.settled or delivery.next_at > now:
            continue
        endpoint = by_id.get(delivery.endpoint_id)
        if endpoint is None or not endpoint.enabled:
            # Removed or disabled: no attempt is spent; looked at again later, so the
            # pledge is not taken on every pass meanwhile.
            deliveries[key] = replace(delivery, next_at=now + PAUSED_RECHECK_S)
            continue
        # No POST starts unless the shard's lease outlasts it (renewed if need be), so
        # no other dispatcher sends this pledge while this one may still be sending.
        try:
            keep_lease()
        except ShardLeaseHeld as exc:
            if not attempted:
                raise  # nothing sent: nothing to record
            # Asked to stop, or overtaken, between two endpoints: the answers had are
            # recorded below, or the next dispatcher would send them again. The record is
            # fenced on the pledge as read, so it never writes over a successor's.
            stopped = exc
            break
        attempted = True
        payload = body_bytes(event_payload(state, delivery.event_type))
        message_id = event_id(intent_id, delivery.event_type)
        at = clock.now()
        result = _attempt(endpoint, message_id, payload, resolve=resolve, sender=sender)
        on_attempt(
            Attempt(
                endpoint,
                intent_id,
                EventType.read(delivery.event_type),
                message_id,
                at,
                result,
            )
        )
        deliveries[key] = _after(delivery, result, rng=rng, report=report)
        if deliveries[key].status == DeliveryStatus.GAVE_UP:
            # Its case before the record: a dispatcher dying in between leaves the pledge
            # due, and its successor's give-up finds the case there (its id is stable).
            ack_undelivered_open(repository.store, state, deliveries[key])
    pending = [d.next_at for d in deliveries.values() if not d.settled]
    next_due = max(min(pending), now + 1) if pending else None
    repository.record(
        intent_id,
        fence=state.fence,
        status=state.pledge.status,
        deliveries=deliveries,
        next_due=next_due,
    )
    if next_due is None:
        report.settled += 1
    if stopped is not None:
        raise stopped


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


def _after(
    delivery: Delivery, result: AttemptResult, *, rng: random.Random, report: DispatchReport
) -> Delivery:
    attempts = delivery.attempts + 1
    report.answered[delivery.endpoint_id] = report.answered.get(delivery.endpoint_id) or result.ok
    done = replace(
        delivery,
        attempts=attempts,
        last_code=result.code,
        last_error=result.error[:200],
        last_at=clock.iso(clock.now()),
        last_signature=result.signature,
    )
    if result.ok:
        report.delivered += 1
        return replace(done, status=DeliveryStatus.DELIVERED, next_at=0)
    delay = retry_delay_s(attempts, rng, scale=settings.ACK_RETRY_SCALE)
    if delay is None:
        report.gave_up += 1
        return replace(done, status=DeliveryStatus.GAVE_UP, next_at=0)
    report.failed += 1
    return replace(done, next_at=clock.epoch() + delay)
