"""The events a pledge's acknowledgements carry, and their bodies (docs/webhooks.md): a
``pledge.recorded`` for every pledge, a ``pledge.voided`` once it is voided; the body is
the pledge as recorded, serialised the same way on every attempt, so a retry signs and
sends the very same bytes."""

from __future__ import annotations

import json
from typing import Any

from reconciliation.acks.models import PAYLOAD_VERSION, AckState, EventType
from reconciliation.claims.models import PledgeStatus


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
