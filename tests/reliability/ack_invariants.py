"""The acknowledgements' invariants at rest in the reliability run (docs/webhooks.md
"The promise"), over the pledges' delivery state as stored and what the receiver
(``webhook_sink``, its ``GET /stats``) says it saw, never over what the dispatcher
reported.

The rules are the explorer's (reconciliation/simulation/ack_invariants.py: g, h, i): nothing
lost, never processed twice, never for an unrecorded intent, what was processed the
pledge's own payload, nothing waiting at rest. This module only translates the sink's
``/stats`` into :class:`Receipt` s, counts the run's figures from the problems' faults,
and adds the rule of this run alone:

- **None given up**: the retry schedule is shrunk so the run outlasts many attempts but
  never all twelve, so at rest a GAVE_UP delivery is a failure (the explorer, whose
  faults may exhaust a delivery, allows one with its ACK_UNDELIVERED case).

``tests/reliability/test_ack_invariants.py`` breaks each invariant on purpose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciliation.acks.models import AckState, DeliveryStatus, Endpoint, EventType, event_id
from reconciliation.acks.repository import AckRepository
from reconciliation.cases.vocabulary import CaseType
from reconciliation.simulation.ack_invariants import (
    AckFault,
    Receipt,
    ack_problems,
    due_events,
    owed_events,
)
from reconciliation.simulation.invariants import Problem
from reconciliation.stores import Store
from tests.helpers import scan_all

NONE_GIVEN_UP = "none given up in the reliability run"


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

    def receipts(self, states: Sequence[AckState]) -> list[Receipt]:
        """What the sink heard, as receipts: each processing, then each delivery it did not
        process (a duplicate, or one lost before processing). The sink keeps the payload
        of what it processed only: a delivery of an id it never processed is named by the
        stored pledge's event that has the id, if one has (else by nothing)."""
        named = {
            event_id(state.intent_id, event): (state.intent_id, str(event))
            for state in states
            for event in EventType
        }

        def heard(webhook_id: str, processed: bool) -> Receipt:
            payload = self.events.get(webhook_id)
            if payload is not None:
                return Receipt.of(webhook_id, payload, processed=processed)
            intent_id, event_type = named.get(webhook_id, ("", ""))
            return Receipt(webhook_id, intent_id, event_type, processed)

        unprocessed = Counter(self.ids_seen) - Counter(self.processed)
        return [
            *(heard(webhook_id, True) for webhook_id in self.processed),
            *(heard(webhook_id, False) for webhook_id in unprocessed.elements()),
        ]


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
    problems: list[Problem] = field(default_factory=list)

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


def given_up_problems(states: Sequence[AckState], endpoint: Endpoint) -> list[Problem]:
    """This run's own rule: at rest no delivery to ``endpoint`` ran out of attempts."""
    return [
        Problem(NONE_GIVEN_UP, f"{state.intent_id}: {key} given up")
        for state in states
        for key, delivery in sorted(state.deliveries.items())
        if delivery.endpoint_id == endpoint.endpoint_id
        and delivery.status == DeliveryStatus.GAVE_UP
    ]


def ack_check(
    states: Sequence[AckState],
    seen: SinkSeen,
    *,
    endpoint: Endpoint,
    cases: Sequence[dict[str, Any]],
) -> AckReport:
    """Check the invariants for ``endpoint`` over every pledge ``states`` (all tenants:
    another tenant's pledge must have sent nothing to it) and the ACK_UNDELIVERED
    ``cases``; the figures counted from the problems."""
    shared = ack_problems(states, seen.receipts(states), endpoint=endpoint, cases=cases)
    given_up = given_up_problems(states, endpoint)
    faults = Counter(problem.fault for problem in shared)
    return AckReport(
        recorded=sum(1 for s in states if s.tenant == endpoint.tenant and due_events(s)),
        events_due=len(owed_events(states, endpoint)),
        deliveries=len(seen.ids_seen),
        processed=len(seen.processed),
        duplicates=seen.duplicates,
        lost=faults[AckFault.LOST],
        processed_twice=faults[AckFault.PROCESSED_TWICE],
        unrecorded=faults[AckFault.UNRECORDED],
        given_up=len(given_up),
        pending=faults[AckFault.STILL_DUE] + faults[AckFault.WAITING],
        problems=[*shared, *given_up],
    )


def ack_states(ddb, store: Store) -> list[AckState]:
    """Every pledge's acknowledgement state, each read consistently (tests may Scan)."""
    repository = AckRepository(store)
    states = [repository.get(item["intent_id"]) for item in scan_all(ddb, ddb.tables.pledges)]
    return [state for state in states if state is not None]


def undelivered_cases(ddb) -> list[dict[str, Any]]:
    """The ACK_UNDELIVERED cases, each the given-up delivery's (tests may Scan)."""
    cases = scan_all(ddb, ddb.tables.cases)
    return [case for case in cases if case.get("case_type") == CaseType.ACK_UNDELIVERED]
