"""The ``ACK_UNDELIVERED`` case (docs/webhooks.md, docs/design.md §6): an acknowledgement
the dispatcher gave up on after its last attempt becomes work for staff.

One case per pledge, endpoint and event type: its id derives from the three
(``case_id_for``), and ``case_open`` writes it with a put conditioned on the id being
new, so a second dispatcher, or a give-up recorded again after a lost lease, opens no
second case. The pledge is recorded either way; the case asks only whether its
acknowledgement should be sent again (Redeliver) or not (Close without delivery).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from reconciliation import clock
from reconciliation.acks.models import Delivery, event_id
from reconciliation.actors import system_actor
from reconciliation.audit.repository import GENESIS_HASH
from reconciliation.cases.models import DRILL_TENANT, Case, Evidence, case_id_for
from reconciliation.cases.vocabulary import CaseState, CaseType, Queue
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.claims.opening import case_open

if TYPE_CHECKING:
    from reconciliation.acks.models import AckState
    from reconciliation.stores import Store

logger = logging.getLogger(__name__)


def ack_case_id(intent_id: str, endpoint_id: str, event_type: str, region_tag: str = "") -> str:
    """The id of the one ACK_UNDELIVERED case of a pledge's event to one endpoint."""
    source = f"ACK#{intent_id}#{endpoint_id}#{event_type}"
    return case_id_for(source, 0, CaseType.ACK_UNDELIVERED, region_tag)


def ack_evidence(intent_id: str, delivery: Delivery) -> dict[str, Any]:
    """What the case records of the delivery given up on (``case.evidence.ack``)."""
    return {
        "endpoint_id": delivery.endpoint_id,
        "url": delivery.url,
        "event_type": str(delivery.event_type),
        "webhook_id": event_id(intent_id, delivery.event_type),
        "attempts": delivery.attempts,
        "last_code": delivery.last_code,
        "last_error": delivery.last_error,
        "last_at": delivery.last_at,
    }


def ack_undelivered_open(store: Store, state: AckState, delivery: Delivery) -> tuple[str, bool]:
    """Open the ACK_UNDELIVERED case of ``delivery`` (given up on), once: its id and
    whether this call created it (opening it again is a no-op)."""
    pledge = state.pledge
    now = clock.iso(clock.now())
    case_id = ack_case_id(state.intent_id, delivery.endpoint_id, delivery.event_type, store.tag)
    case = Case(
        case_id=case_id,
        case_type=CaseType.ACK_UNDELIVERED,
        state=CaseState.OPEN,
        version=1,
        opened_at=now,
        claim_pk=claim_pk(pledge.tenant, OPERATION_CREATE_PLEDGE, pledge.idempotency_key),
        claim_version=0,
        intent_id=state.intent_id,
        tenant=pledge.tenant,
        fund=pledge.fund,
        amount=pledge.amount,
        currency=pledge.currency,
        request_token="",
        token_issued_at="",
        audit_seq=0,
        audit_head=GENESIS_HASH,
        queue=Queue.ACK_UNDELIVERED,
        queue_sort=f"{now}#{case_id}",
        evidence=Evidence(ack=ack_evidence(state.intent_id, delivery)),
        last_action_at=now,
        in_totals=True,
        drill_tallied=pledge.tenant == DRILL_TENANT,
        donor_ref=pledge.donor_ref or None,
    )
    stored, created = case_open(store, case=case, actor=system_actor())
    if created:
        logger.info(
            "acknowledgement of %s to %s undeliverable: case %s",
            state.intent_id,
            delivery.endpoint_id,
            stored.case_id,
        )
    return stored.case_id, created
