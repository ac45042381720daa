"""The acknowledgements' invariants at rest (issue 26; docs/webhooks.md "The promise"),
checked over the pledges' delivery state as stored and what the receiver (``webhook_sink``,
its ``GET /stats``) says it saw, never over what the dispatcher reported:

1. **Nothing lost**: every recorded pledge's event (``pledge.recorded``, and
   ``pledge.voided`` once voided) was processed by the receiver, and its delivery to the
   endpoint is ``DELIVERED``, with the pledge out of ``acks_due``;
2. **Never processed twice**: the receiver processed each ``webhook-id`` once, whatever
   it was sent (duplicates are deliveries it recognised and did not apply);
3. **Never for an unrecorded intent**: every ``webhook-id`` the receiver was sent is the
   event of a recorded pledge, and what it processed carries that pledge's fields;
4. **None given up**: no delivery ran out of attempts (at rest, with the retry schedule
   shrunk so the run outlasts many attempts but never all twelve).

The checker is plain data in, problems in words out; ``tests/reliability/
test_ack_invariants.py`` breaks each invariant on purpose.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reconciliation.acks.dispatch import events_of
from reconciliation.acks.models import AckState, DeliveryStatus, Endpoint, delivery_key, event_id
from reconciliation.acks.repository import AckRepository
from reconciliation.stores import Store
from tests.helpers import scan_all


@dataclass(frozen=True)
class SinkSeen:
    """The receiver's ``GET /stats``: every delivery's id, what it processed, its payloads."""

    ids_seen: tuple[str, ...]
    processed: tuple[str, ...]
    events: dict[str, dict[str, Any]]
    duplicates: int = 0

    @classmethod
    def from_stats(cls, stats: dict[str, Any]) -> SinkSeen:
        return cls(
            ids_seen=tuple(stats["ids_seen"]),
            processed=tuple(stats["processed"]),
            events=dict(stats["events"]),
            duplicates=int(stats["duplicates"]),
        )


@dataclass
class AckReport:
    recorded: int = 0  # pledges of the endpoint's tenant
    events_due: int = 0  # events those pledges must have delivered
    deliveries: int = 0  # POSTs the receiver verified
    processed: int = 0
    duplicates: int = 0
    lost: int = 0
    processed_twice: int = 0
    unrecorded: int = 0
    given_up: int = 0
    pending: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def figures(self) -> dict[str, int]:
        return {
            "recorded": self.recorded,
            "events_due": self.events_due,
            "deliveries": self.deliveries,
            "processed": self.processed,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "processed_twice": self.processed_twice,
            "sent_for_unrecorded": self.unrecorded,
            "given_up": self.given_up,
            "pending": self.pending,
        }


def ack_check(states: list[AckState], seen: SinkSeen, *, endpoint: Endpoint) -> AckReport:
    """Check the invariants for ``endpoint`` over every pledge ``states`` (all tenants:
    another tenant's pledge must have sent nothing to it); problems listed in words."""
    report = AckReport(
        deliveries=len(seen.ids_seen), processed=len(seen.processed), duplicates=seen.duplicates
    )
    problems = report.problems
    processed = Counter(seen.processed)
    due: dict[str, AckState] = {}  # webhook-id -> the pledge whose event it is
    for state in states:
        if state.tenant != endpoint.tenant:
            continue
        report.recorded += 1
        if state.due:
            report.pending += 1
            problems.append(f"{state.intent_id}: still in acks_due at rest")
        for event_type in events_of(state):
            if not endpoint.wants(event_type):
                continue
            message = event_id(state.intent_id, event_type)
            due[message] = state
            report.events_due += 1
            delivery = state.deliveries.get(delivery_key(endpoint.endpoint_id, event_type))
            if delivery is None:
                problems.append(f"{state.intent_id} {event_type}: no delivery recorded")
            elif delivery.status == DeliveryStatus.GAVE_UP:
                report.given_up += 1
                problems.append(f"{state.intent_id} {event_type}: given up")
            elif delivery.status != DeliveryStatus.DELIVERED:
                report.pending += 1
                problems.append(f"{state.intent_id} {event_type}: {delivery.status} at rest")
            if processed[message] == 0:
                report.lost += 1
                problems.append(f"{state.intent_id} {event_type}: never processed (lost)")
            elif not _carries(seen.events.get(message), state, event_type):
                problems.append(f"{state.intent_id} {event_type}: processed another payload")
    for message, times in sorted(processed.items()):
        if times > 1:
            report.processed_twice += 1
            problems.append(f"{message}: processed {times} times")
    for message in sorted(set(seen.ids_seen) - set(due)):
        report.unrecorded += 1
        problems.append(f"{message}: sent, but no recorded pledge's event has that id")
    return report


def _carries(payload: dict[str, Any] | None, state: AckState, event_type: str) -> bool:
    if payload is None:
        return False
    data = payload.get("data", {})
    return (
        payload.get("type") == event_type
        and data.get("tenant") == state.tenant
        and data.get("intent_id") == state.pledge.idempotency_key
        and data.get("amount") == state.pledge.api_body()["amount"]
        and data.get("currency") == state.pledge.currency
    )


def ack_states(ddb, store: Store) -> list[AckState]:
    """Every pledge's acknowledgement state, each read consistently (tests may Scan)."""
    repository = AckRepository(store)
    states = [repository.get(item["intent_id"]) for item in scan_all(ddb, ddb.tables.pledges)]
    return [state for state in states if state is not None]
