"""What must hold of acknowledgements at rest (issue 26, docs/webhooks.md), beside
:mod:`reconciliation.ops.invariants` and :mod:`reconciliation.ops.hands_invariants`.

Read from the stored outcome only: the ``acks`` map and ``acks_due`` presence on the
pledge item, the ACK_UNDELIVERED cases, and what the receiver heard. Never from how a
dispatcher took its lease (per pledge or per shard: either must give the same outcome).

g. every recorded pledge (RECORDED, or VOIDED: a voided pledge was recorded first) has,
   per subscribed endpoint and per event it is due (``pledge.recorded``, and
   ``pledge.voided`` once voided), exactly one delivery that is DELIVERED, or PENDING
   while the pledge is still in ``acks_due``, or GAVE_UP with its ACK_UNDELIVERED case;
   none for an event the pledge never had; after the dispatcher drained, none is due;
h. no event reached the receiver for an intent without a recorded pledge, and no
   ``pledge.voided`` for a pledge that is not VOIDED;
i. the receiver processed each event exactly once after deduplication: one processing
   per ``webhook-id``, one ``webhook-id`` per (intent, event), the id the event's own
   (``event_id``), and every delivery recorded DELIVERED was processed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciliation.acks.models import DeliveryStatus, Endpoint, EventType, delivery_key, event_id
from reconciliation.cases.vocabulary import CaseType
from reconciliation.claims.models import PledgeStatus
from reconciliation.ops.invariants import WAS_RECORDED, Problem

ONE_DELIVERY = "g one delivery per recorded pledge, endpoint and event"
NONE_UNRECORDED = "h no event for an unrecorded intent"
PROCESSED_ONCE = "i each event processed once"

RECORDED_STATES = WAS_RECORDED  # a void comes after the record


@dataclass(frozen=True)
class Receipt:
    """One delivery as the receiver heard it: whose event, and whether this delivery was
    the one processed (the first with its ``webhook-id``) or a duplicate."""

    webhook_id: str
    intent_id: str
    event_type: str
    processed: bool


def due_events(pledge: Mapping[str, Any]) -> tuple[EventType, ...]:
    """The events a stored pledge has had: none before it is recorded."""
    status = pledge.get("status")
    if status not in RECORDED_STATES:
        return ()
    if status == PledgeStatus.VOIDED:
        return (EventType.PLEDGE_RECORDED, EventType.PLEDGE_VOIDED)
    return (EventType.PLEDGE_RECORDED,)


def _given_up_cases(cases: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    out = set()
    for case in cases:
        if case.get("case_type") != CaseType.ACK_UNDELIVERED:
            continue
        ack = (case.get("evidence") or {}).get("ack") or {}
        subject = (str(ack.get("endpoint_id")), str(ack.get("event_type")))
        out.add((str(case.get("intent_id")), *subject))
    return out


def delivery_problems(
    pledges: Iterable[Mapping[str, Any]],
    endpoints: Sequence[Endpoint],
    cases: Iterable[Mapping[str, Any]] = (),
    *,
    drained: bool = False,
) -> list[Problem]:
    """Invariant g over plain pledge items (``from_item``) and the tenant's endpoints."""
    given_up = _given_up_cases(cases)
    problems: list[Problem] = []
    for pledge in pledges:
        intent_id = str(pledge["intent_id"])
        acks: Mapping[str, Any] = pledge.get("acks") or {}
        due = pledge.get("ack_due_at") is not None
        if drained and due:
            problems.append(Problem(ONE_DELIVERY, f"{intent_id}: still due after the drain"))
        events = due_events(pledge)
        expected = {
            delivery_key(e.endpoint_id, event): (e, event)
            for event in events
            for e in endpoints
            if e.tenant == pledge.get("tenant") and e.wants(event)
        }
        for key in sorted(set(acks) - set(expected)):
            problems.append(
                Problem(ONE_DELIVERY, f"{intent_id}: a delivery {key} for an event it never had")
            )
        for key, (endpoint, event) in sorted(expected.items()):
            delivery = acks.get(key)
            status = None if delivery is None else delivery.get("status")
            if status == DeliveryStatus.DELIVERED:
                continue
            if status == DeliveryStatus.GAVE_UP:
                if (intent_id, endpoint.endpoint_id, str(event)) not in given_up:
                    problems.append(
                        Problem(ONE_DELIVERY, f"{intent_id}: {key} given up without its case")
                    )
                continue
            if due and not drained:
                continue  # PENDING, or not yet taken: the dispatcher will send it
            state = "missing" if delivery is None else str(status)
            where = "after the drain" if drained else "and the pledge is not in acks_due"
            problems.append(Problem(ONE_DELIVERY, f"{intent_id}: {key} {state} {where}"))
    return problems


def unrecorded_problems(
    pledges: Iterable[Mapping[str, Any]], receipts: Iterable[Receipt]
) -> list[Problem]:
    """Invariant h: every event heard is about a recorded pledge, a void about a void."""
    status = {str(p["intent_id"]): p.get("status") for p in pledges}
    problems = []
    for receipt in dict.fromkeys(receipts):
        known = status.get(receipt.intent_id)
        if known not in RECORDED_STATES:
            problems.append(
                Problem(
                    NONE_UNRECORDED,
                    f"{receipt.event_type} {receipt.webhook_id} sent for {receipt.intent_id}, "
                    f"whose pledge is {known or 'absent'}",
                )
            )
        elif receipt.event_type == EventType.PLEDGE_VOIDED and known != PledgeStatus.VOIDED:
            problems.append(
                Problem(
                    NONE_UNRECORDED,
                    f"pledge.voided sent for {receipt.intent_id}, whose pledge is {known}",
                )
            )
    return problems


def processed_problems(
    receipts: Sequence[Receipt], pledges: Iterable[Mapping[str, Any]] = ()
) -> list[Problem]:
    """Invariant i: each event processed exactly once by the deduplicating receiver."""
    problems = []
    processed = Counter(r.webhook_id for r in receipts if r.processed)
    for webhook_id, count in sorted(processed.items()):
        if count > 1:
            problems.append(Problem(PROCESSED_ONCE, f"{webhook_id} processed {count} times"))
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for receipt in receipts:
        ids[(receipt.intent_id, receipt.event_type)].add(receipt.webhook_id)
    for (intent_id, event_type), seen in sorted(ids.items()):
        if seen != {event_id(intent_id, event_type)}:
            problems.append(
                Problem(
                    PROCESSED_ONCE,
                    f"{event_type} of {intent_id} carried {len(seen)} webhook-ids "
                    f"{sorted(seen)} (one, its own, would be processed once)",
                )
            )
    for pledge in pledges:
        intent_id = str(pledge["intent_id"])
        for key, delivery in sorted((pledge.get("acks") or {}).items()):
            if delivery.get("status") != DeliveryStatus.DELIVERED:
                continue
            webhook_id = event_id(intent_id, str(delivery.get("event_type")))
            if processed[webhook_id] != 1:
                problems.append(
                    Problem(
                        PROCESSED_ONCE,
                        f"{intent_id}: {key} recorded DELIVERED, processed "
                        f"{processed[webhook_id]} times",
                    )
                )
    return problems
