"""An endpoint failing every delivery for a day is disabled (docs/webhooks.md): its
``WebhookEndpoint`` row, a ``webhook_disabled`` audit event by the system, its deliveries
waiting, and a line on the overview. An answer in between clears the mark."""

from __future__ import annotations

import pytest

from dashboard.management.commands.dispatch_acks import endpoints_for
from dashboard.models import WebhookEndpoint
from dashboard.tenant_changes import endpoints_watch, webhook_register
from reconciliation import clock
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult
from reconciliation.actors import system_actor
from reconciliation.stores import first_store
from tests.conftest import pledge_body, staff_actor
from tests.dashboard.test_labels import signed_in, visible_text
from tests.helpers import audit_events

pytestmark = pytest.mark.django_db

URL = "https://crm.example.org/hooks"


def dispatch(codes: list[int]) -> dict[str, bool]:
    def send(*args, **kwargs) -> AttemptResult:
        return AttemptResult(codes.pop(0) if codes else 500)

    report = acks_dispatch_once(
        first_store(),
        endpoints_for=endpoints_for,
        resolve=lambda host, port: ["93.184.216.34"],
        sender=send,
    )
    endpoints_watch(report.answered, actor=system_actor())
    return report.answered


def test_a_day_of_failed_deliveries_disables_the_endpoint_and_the_overview_says_so(ddb, api):
    endpoint = webhook_register("acme", URL, events=("pledge.recorded",), actor=staff_actor())
    assert api.post("d-1", pledge_body()).status_code == 201
    assert dispatch([500]) == {f"E{endpoint.pk}": False}
    endpoint.refresh_from_db()
    assert endpoint.enabled and endpoint.failing_since is not None

    # An answer 2xx within the day clears the mark.
    assert api.post("d-2", pledge_body()).status_code == 201
    with clock.travel(3600):
        assert dispatch([200, 500]) == {f"E{endpoint.pk}": True}
    endpoint.refresh_from_db()
    assert endpoint.enabled and endpoint.failing_since is None

    # Failing from then on: still enabled before a day has passed, disabled after.
    with clock.travel(2 * 3600):
        dispatch([])
    with clock.travel(12 * 3600):
        dispatch([])
    endpoint.refresh_from_db()
    assert endpoint.enabled
    with clock.travel(2 * 3600 + 86400 + 60):
        dispatch([])
    endpoint.refresh_from_db()
    assert not endpoint.enabled and endpoint.disabled_at is not None
    [event] = [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "webhook_disabled"]
    assert event["actor"]["role"] == "system"
    assert (event["before"]["enabled"], event["after"]["enabled"]) == (True, False)

    # Its deliveries wait: nothing more is sent to it.
    sent: list[int] = []
    with clock.travel(10 * 86400):
        acks_dispatch_once(
            first_store(),
            endpoints_for=endpoints_for,
            resolve=lambda host, port: ["93.184.216.34"],
            sender=lambda *a, **k: sent.append(1) or AttemptResult(500),
        )
    assert sent == []

    for role in ("supervisor", "finance_staff"):
        page = signed_in(role).get("/")
        assert page.status_code == 200
        text = visible_text(page.content.decode())
        assert f"Acknowledgements to {URL} (tenant acme" in text
        assert "are paused: the endpoint was disabled" in text
        assert "Nothing: no override request" not in text
    assert WebhookEndpoint.objects.filter(enabled=False).count() == 1
