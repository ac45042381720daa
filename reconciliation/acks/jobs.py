"""One pledge in a dispatcher's hands (reconciliation/acks/dispatch.py): the deliveries
it has when taken, the sends not yet ended, and when it is due again once they have.

Endpoints subscribed since the pledge was recorded join its events' deliveries; a
delivery to an endpoint disabled or removed since spends no attempt and is looked at
again ``PAUSED_RECHECK_S`` later, so the pledge is not taken on every pass meanwhile."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from reconciliation.acks.events import events_of
from reconciliation.acks.models import AckState, Delivery, Endpoint, delivery_key
from reconciliation.acks.shard_lease import ShardLeaseHeld

PAUSED_RECHECK_S = 3600


@dataclass
class Job:
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

    def next_due(self, now: int) -> int | None:
        """When the pledge is due again: its first unsettled delivery's time, never
        before the next second; none once every delivery is settled."""
        pending = [d.next_at for d in self.deliveries.values() if not d.settled]
        return max(min(pending), now + 1) if pending else None


def job_take(
    state: AckState, shard: str, by_id: dict[str, Endpoint], *, now: int
) -> tuple[Job, list[str]]:
    """The job of ``state`` as taken at ``now`` (``by_id``: its tenant's endpoints), and
    the keys of the deliveries to send now."""
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
    return Job(state, shard, deliveries, by_id, left=len(sends)), sends
