"""The webhook event payload is versioned as the intake request is: ``type``
plus ``version``, the payload's own version (``PAYLOAD_VERSION``), independent of the
``Pledge-Version`` the pledge was recorded under, which the event does not carry."""

from __future__ import annotations

from decimal import Decimal

from reconciliation.acks.events import event_payload
from reconciliation.acks.models import PAYLOAD_VERSION, AckState, EventType
from reconciliation.claims.models import Pledge, PledgeStatus


def _state(pledge_version: str | None) -> AckState:
    pledge = Pledge(
        intent_id="acme#k-1",
        tenant="acme",
        donor_ref="D-1001",
        fund="GENERAL",
        amount=Decimal("25.00"),
        currency="USD",
        status=PledgeStatus.RECORDED,
        request_token="tok",
        created_at="2026-12-03T10:00:00.000Z",
        ledger_key="GENERAL#USD#0",
        pledge_version=pledge_version,
    )
    return AckState("acme#k-1", "acme", 0, 0, pledge)


def test_the_event_names_its_type_and_its_own_version_whatever_the_intake_version():
    payloads = [
        event_payload(_state(v), EventType.PLEDGE_RECORDED)
        for v in (None, "2026-12-01", "2027-06-01")
    ]
    for payload in payloads:
        assert payload["type"] == "pledge.recorded"
        assert payload["version"] == PAYLOAD_VERSION == 1
        assert "pledge_version" not in payload["data"]
    assert payloads[0] == payloads[1] == payloads[2]
