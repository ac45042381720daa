"""What must hold of acknowledgements at rest (docs/webhooks.md "The promise"),
beside :mod:`reconciliation.simulation.invariants` and
:mod:`reconciliation.simulation.hands_invariants`: one checker, for the explorer's hands
(reconciliation/simulation/explorer/hands.py) and for the reliability run with the real
``webhook_sink`` (tests/reliability/ack_invariants.py).

Read from the stored outcome only: each pledge's :class:`AckState` (its ``acks`` map and
``acks_due`` presence), the ACK_UNDELIVERED cases, and what the receiver heard, as
:class:`Receipt` s. Never from what the dispatcher reported, nor from how it took its
lease (per pledge or per shard: either must give the same outcome).

g. every recorded pledge (RECORDED, or VOIDED: a voided pledge was recorded first) has,
   per subscribed endpoint and per event it is due (``pledge.recorded``, and
   ``pledge.voided`` once voided), exactly one delivery that is DELIVERED, or PENDING
   while the pledge is still in ``acks_due``, or GAVE_UP with its ACK_UNDELIVERED case;
   none for an event the pledge never had (:func:`delivery_problems`); at rest none is
   due and none waits (:func:`rest_problems`);
h. the receiver heard only events it is owed: none for an intent without a recorded
   pledge, nor for another tenant's pledge, nor a ``pledge.voided`` for a pledge that is
   not VOIDED, nor an event its endpoint is not subscribed to (:func:`unrecorded_problems`);
i. the receiver processed each event exactly once, as itself: one processing per
   ``webhook-id``, one ``webhook-id`` per (intent, event), the event's own
   (``event_id``), and what it processed carries the pledge's own fields; at rest every
   event it is owed was processed, unless its delivery was given up (none lost:
   :func:`processed_problems`).

A delivery given up with its case is allowed here (the explorer's faults may exhaust a
delivery); the reliability run, whose retry schedule is never exhausted, adds its own
rule that none is. Each problem names its :class:`AckFault`, so a run counts its figures
from the problems (tests/reliability/ack_invariants.py · AckReport).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reconciliation.acks.models import (
    AckState,
    Delivery,
    DeliveryStatus,
    Endpoint,
    EventType,
    delivery_key,
    event_id,
)
from reconciliation.cases.vocabulary import CaseType
from reconciliation.claims.models import PledgeStatus, intent_id_for
from reconciliation.simulation.invariants import WAS_RECORDED, Problem

ONE_DELIVERY = "g one delivery per recorded pledge, endpoint and event"
NONE_UNRECORDED = "h no event for an unrecorded intent"
PROCESSED_ONCE = "i each event processed once"

RECORDED_STATES = WAS_RECORDED  # a void comes after the record


class AckFault(StrEnum):
    """What one problem found: a run's figures count the problems of each kind."""

    STRAY = "stray"  # g: a delivery for an event the pledge never had
    GAVE_UP_WITHOUT_CASE = "gave_up_without_case"  # g
    MISSING = "missing"  # g: an owed delivery absent, the pledge out of acks_due or at rest
    WAITING = "waiting"  # g: PENDING, and the pledge out of acks_due or at rest
    STILL_DUE = "still_due"  # g: in acks_due at rest
    UNRECORDED = "unrecorded"  # h: heard an event the receiver is not owed
    PROCESSED_TWICE = "processed_twice"  # i
    OTHER_ID = "other_id"  # i: an event under a webhook-id not its own
    OTHER_PAYLOAD = "other_payload"  # i: processed, but not the pledge's fields
    LOST = "lost"  # i: owed, not given up, never processed


@dataclass(frozen=True)
class AckProblem(Problem):
    """A problem of invariant g, h or i, with what it found."""

    fault: AckFault


@dataclass(frozen=True)
class Receipt:
    """One delivery as the receiver heard it: its ``webhook-id``, whether it was the one
    processed (the first with its id) or a duplicate, and what its payload said: whose
    event (the stored intent id, the tenant's and its key), its amount and currency.
    Empty where the receiver kept no payload of it."""

    webhook_id: str
    intent_id: str
    event_type: str
    processed: bool
    amount: str = ""
    currency: str = ""

    @classmethod
    def of(cls, webhook_id: str, payload: Mapping[str, Any], *, processed: bool) -> Receipt:
        """A delivery as its payload tells it: ``data.intent_id`` is the tenant's own key
        (as the intake API answers), so the stored intent id is the tenant's and the key."""
        data = payload.get("data") or {}
        return cls(
            webhook_id,
            intent_id_for(str(data.get("tenant")), str(data.get("intent_id"))),
            str(payload.get("type")),
            processed,
            amount=str(data.get("amount", "")),
            currency=str(data.get("currency", "")),
        )


def due_events(state: AckState) -> tuple[EventType, ...]:
    """The events a stored pledge has had: none before it is recorded. Written apart from
    the dispatcher's ``events_of`` (reconciliation/acks/events.py), so a dispatcher that
    forgets an event is caught."""
    status = state.pledge.status
    if status not in RECORDED_STATES:
        return ()
    if status == PledgeStatus.VOIDED:
        return (EventType.PLEDGE_RECORDED, EventType.PLEDGE_VOIDED)
    return (EventType.PLEDGE_RECORDED,)


def owed_deliveries(
    state: AckState, endpoints: Sequence[Endpoint]
) -> dict[str, tuple[Endpoint, EventType]]:
    """The deliveries ``state`` owes, by their key in its ``acks`` map: per event it is due,
    one to each endpoint of its tenant subscribed to the event."""
    return {
        delivery_key(endpoint.endpoint_id, event): (endpoint, event)
        for event in due_events(state)
        for endpoint in endpoints
        if endpoint.tenant == state.tenant and endpoint.wants(event)
    }


def owed_events(
    states: Iterable[AckState], endpoint: Endpoint
) -> dict[str, tuple[AckState, EventType]]:
    """The events ``endpoint``'s receiver is owed, by their ``webhook-id``."""
    return {
        event_id(state.intent_id, event): (state, event)
        for state in states
        for _, event in owed_deliveries(state, [endpoint]).values()
    }


def _given_up_cases(cases: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    out = set()
    for case in cases:
        if case.get("case_type") != CaseType.ACK_UNDELIVERED:
            continue
        ack = (case.get("evidence") or {}).get("ack") or {}
        subject = (str(ack.get("endpoint_id")), str(ack.get("event_type")))
        out.add((str(case.get("intent_id")), *subject))
    return out


def _unsettled(state: AckState, key: str, delivery: Delivery | None, where: str) -> AckProblem:
    if delivery is None:
        return AckProblem(
            ONE_DELIVERY, f"{state.intent_id}: {key} missing {where}", AckFault.MISSING
        )
    return AckProblem(
        ONE_DELIVERY, f"{state.intent_id}: {key} {delivery.status} {where}", AckFault.WAITING
    )


def delivery_problems(
    states: Iterable[AckState],
    endpoints: Sequence[Endpoint],
    cases: Iterable[Mapping[str, Any]] = (),
) -> list[AckProblem]:
    """Invariant g, true at any time: each owed delivery DELIVERED, GAVE_UP with its case,
    or not yet settled while the pledge is in ``acks_due``; none owed by no event."""
    given_up = _given_up_cases(cases)
    problems: list[AckProblem] = []
    for state in states:
        owed = owed_deliveries(state, endpoints)
        for key in sorted(set(state.deliveries) - set(owed)):
            detail = f"{state.intent_id}: a delivery {key} for an event it never had"
            problems.append(AckProblem(ONE_DELIVERY, detail, AckFault.STRAY))
        for key, (endpoint, event) in sorted(owed.items()):
            delivery = state.deliveries.get(key)
            if delivery is None or not delivery.settled:
                if not state.due:  # due: the dispatcher will send it
                    problems.append(
                        _unsettled(state, key, delivery, "and the pledge is not in acks_due")
                    )
            elif delivery.status == DeliveryStatus.GAVE_UP and (
                (state.intent_id, endpoint.endpoint_id, str(event)) not in given_up
            ):
                detail = f"{state.intent_id}: {key} given up without its case"
                problems.append(AckProblem(ONE_DELIVERY, detail, AckFault.GAVE_UP_WITHOUT_CASE))
    return problems


def rest_problems(states: Iterable[AckState], endpoints: Sequence[Endpoint]) -> list[AckProblem]:
    """Invariant g at rest (after the drain, or once a run settled): no pledge still in
    ``acks_due``, so none of its owed deliveries still waiting. A pledge out of
    ``acks_due`` with one waiting is :func:`delivery_problems`' to report."""
    problems: list[AckProblem] = []
    for state in states:
        if not state.due:
            continue
        detail = f"{state.intent_id}: still in acks_due at rest"
        problems.append(AckProblem(ONE_DELIVERY, detail, AckFault.STILL_DUE))
        for key in sorted(owed_deliveries(state, endpoints)):
            delivery = state.deliveries.get(key)
            if delivery is None or not delivery.settled:
                problems.append(_unsettled(state, key, delivery, "at rest"))
    return problems


def _unowed(receipt: Receipt, state: AckState | None, endpoint: Endpoint) -> str | None:
    """Why ``endpoint``'s receiver was not owed ``receipt``'s event, if it was not."""
    if not receipt.intent_id:
        return f"{receipt.webhook_id} sent, the event of no stored pledge (no payload kept)"
    sent = f"{receipt.event_type} {receipt.webhook_id} sent for {receipt.intent_id}"
    if state is None or state.pledge.status not in RECORDED_STATES:
        return f"{sent}, whose pledge is {'absent' if state is None else state.pledge.status}"
    if state.tenant != endpoint.tenant:
        return f"{sent}, a pledge of tenant {state.tenant}, to an endpoint of {endpoint.tenant}"
    if receipt.event_type not in due_events(state):
        status = state.pledge.status
        return f"{receipt.event_type} sent for {state.intent_id}, whose pledge is {status}"
    if not endpoint.wants(receipt.event_type):
        return f"{sent} to {endpoint.endpoint_id}, which is not subscribed to it"
    return None


def unrecorded_problems(
    states: Iterable[AckState], receipts: Iterable[Receipt], *, endpoint: Endpoint
) -> list[AckProblem]:
    """Invariant h: every event ``endpoint``'s receiver heard is one it is owed."""
    by_intent = {state.intent_id: state for state in states}
    problems = []
    heard = {(r.webhook_id, r.intent_id, r.event_type): r for r in receipts}
    for receipt in heard.values():
        detail = _unowed(receipt, by_intent.get(receipt.intent_id), endpoint)
        if detail is not None:
            problems.append(AckProblem(NONE_UNRECORDED, detail, AckFault.UNRECORDED))
    return problems


def _other_fields(receipt: Receipt, state: AckState, event: EventType) -> list[str]:
    """What ``receipt``'s payload says that the pledge's event does not."""
    own = {
        "intent": state.intent_id,
        "type": str(event),
        "amount": state.pledge.api_body()["amount"],
        "currency": state.pledge.currency,
    }
    heard = {
        "intent": receipt.intent_id,
        "type": receipt.event_type,
        "amount": receipt.amount,
        "currency": receipt.currency,
    }
    wrong = [name for name in own if heard[name] != own[name]]
    return [f"{name} {heard[name]!r}, not {own[name]!r}" for name in wrong]


def processed_problems(
    states: Iterable[AckState], receipts: Sequence[Receipt], *, endpoint: Endpoint
) -> list[AckProblem]:
    """Invariant i: ``endpoint``'s deduplicating receiver processed each event it is owed
    exactly once, under its own id and as itself (at rest: none lost)."""
    problems = []
    processed = Counter(r.webhook_id for r in receipts if r.processed)
    for webhook_id, count in sorted(processed.items()):
        if count > 1:
            detail = f"{webhook_id} processed {count} times"
            problems.append(AckProblem(PROCESSED_ONCE, detail, AckFault.PROCESSED_TWICE))
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for receipt in receipts:
        if receipt.intent_id:  # no payload kept: whose event it is, h says
            ids[(receipt.intent_id, receipt.event_type)].add(receipt.webhook_id)
    for (intent_id, event_type), seen in sorted(ids.items()):
        if seen != {event_id(intent_id, event_type)}:
            detail = (
                f"{event_type} of {intent_id} carried {len(seen)} webhook-ids "
                f"{sorted(seen)} (one, its own, would be processed once)"
            )
            problems.append(AckProblem(PROCESSED_ONCE, detail, AckFault.OTHER_ID))
    owed = owed_events(states, endpoint)
    for receipt in dict.fromkeys(r for r in receipts if r.processed and r.webhook_id in owed):
        state, event = owed[receipt.webhook_id]
        wrong = _other_fields(receipt, state, event)
        if wrong:
            key = delivery_key(endpoint.endpoint_id, event)
            detail = f"{state.intent_id}: {key} processed another payload ({'; '.join(wrong)})"
            problems.append(AckProblem(PROCESSED_ONCE, detail, AckFault.OTHER_PAYLOAD))
    # Processed under another id is the id's problem (above), not a loss.
    heard = {(r.intent_id, r.event_type) for r in receipts if r.processed}
    for webhook_id, (state, event) in owed.items():
        key = delivery_key(endpoint.endpoint_id, event)
        delivery = state.deliveries.get(key)
        if processed[webhook_id] or (state.intent_id, event) in heard:
            continue
        if delivery is not None and delivery.status == DeliveryStatus.GAVE_UP:
            continue
        recorded = "no delivery recorded" if delivery is None else f"recorded {delivery.status}"
        detail = f"{state.intent_id}: {key} {recorded}, never processed (lost)"
        problems.append(AckProblem(PROCESSED_ONCE, detail, AckFault.LOST))
    return problems


def ack_problems(
    states: Sequence[AckState],
    receipts: Sequence[Receipt],
    *,
    endpoint: Endpoint,
    cases: Iterable[Mapping[str, Any]] = (),
) -> list[AckProblem]:
    """Every rule at rest, over the pledges ``states`` (any tenant's: another tenant's
    pledge owes ``endpoint`` nothing) and the ``receipts`` of ``endpoint``'s receiver."""
    # g over the endpoint's tenant only: another tenant's deliveries go to its own
    # endpoints, unknown here, and may still be due at rest (one that fails). h and i
    # read every tenant's, to name whose event the receiver should not have heard.
    own = [state for state in states if state.tenant == endpoint.tenant]
    return [
        *delivery_problems(own, [endpoint], cases),
        *rest_problems(own, [endpoint]),
        *unrecorded_problems(states, receipts, endpoint=endpoint),
        *processed_problems(states, receipts, endpoint=endpoint),
    ]
