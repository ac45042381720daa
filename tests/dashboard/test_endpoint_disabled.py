"""An endpoint failing every delivery for a day is disabled (docs/webhooks.md): its
``WebhookEndpoint`` row, a ``webhook_disabled`` audit event by the system, its deliveries
waiting, a line on the overview, and in the supervisors' daily e-mail. An answer in
between clears the mark."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail

from dashboard.tenancy.models import WebhookEndpoint
from dashboard.tenancy.tenant_changes import endpoints_watch, webhook_register
from reconciliation import clock
from reconciliation.acks.models import AttemptResult
from reconciliation.actors import system_actor
from reconciliation.casework.hooks import disabled_endpoints_asked
from reconciliation.casework.notifications import digest_send
from tests.conftest import pledge_body, staff_actor
from tests.dashboard.dispatch import dispatch_acks
from tests.dashboard.test_labels import signed_in, visible_text
from tests.helpers import AS_SYSTEM, audit_events, staff_user

pytestmark = pytest.mark.django_db

URL = "https://crm.example.org/hooks"


def dispatch(codes: list[int]) -> dict[str, bool]:
    def send(*args, **kwargs) -> AttemptResult:
        return AttemptResult(codes.pop(0) if codes else 500)

    report = dispatch_acks(send)
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
        dispatch_acks(lambda *a, **k: sent.append(1) or AttemptResult(500))
    assert sent == []

    for role in ("supervisor", "finance_staff"):
        page = signed_in(role).get("/")
        assert page.status_code == 200
        text = visible_text(page.content.decode())
        assert f"Acknowledgements to {URL} (tenant acme" in text
        assert "are paused: the endpoint was disabled" in text
        assert "Nothing: no override request" not in text
    assert WebhookEndpoint.objects.filter(enabled=False).count() == 1


def disable(endpoint: WebhookEndpoint, *, days_ago: int, last_success_days_ago: int | None):
    """Mark ``endpoint`` as the dispatcher leaves one it disabled (endpoints_watch, above)."""
    now = clock.now()
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        enabled=False,
        disabled_at=now - timedelta(days=days_ago),
        failing_since=now - timedelta(days=days_ago + 1),
        last_success_at=(
            None if last_success_days_ago is None else now - timedelta(days=last_success_days_ago)
        ),
    )


@pytest.mark.engines("moto")
def test_the_supervisors_daily_email_lists_disabled_endpoints(ddb, settings):
    """With no case to report, two disabled endpoints still send the e-mail, the latest
    disabled first: tenant, URL, since when, the last answer with success (or never);
    an enabled endpoint is not listed."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.SITE_URL = "https://pledges.example.org"
    staff_user("sup1", "supervisor", email="sup1@example.org")
    older = webhook_register("acme", URL, events=("pledge.recorded",), actor=staff_actor())
    newer = webhook_register(
        "globex", "https://erp.example.com/in", events=("pledge.recorded",), actor=staff_actor()
    )
    webhook_register(
        "acme", "https://ok.example.org/", events=("pledge.recorded",), actor=staff_actor()
    )
    disable(older, days_ago=3, last_success_days_ago=5)
    disable(newer, days_ago=1, last_success_days_ago=None)

    sent = digest_send(store=AS_SYSTEM.store)

    [message] = mail.outbox
    assert message.subject.endswith(", 2 webhook endpoints disabled")
    assert sent.line().endswith("2 endpoints disabled; sent to 1 supervisor")
    lines = message.body.splitlines()
    start = lines.index(
        "Webhook endpoints disabled after a day of failed deliveries: 2 (their "
        "acknowledgements wait until each is enabled again) — https://pledges.example.org/acks/"
    )
    first, second = lines[start + 1], lines[start + 2]
    assert first.startswith(
        f"  - E{newer.pk} of tenant globex: https://erp.example.com/in, disabled "
    )
    assert first.endswith("(1 d 0 h ago), never answered with success")
    assert second.startswith(f"  - E{older.pk} of tenant acme: {URL}, disabled ")
    last_success = (clock.now() - timedelta(days=5)).strftime("%Y-%m-%d %H:%M")
    assert second.endswith(f"(3 d 0 h ago), last answered with success {last_success} UTC")
    assert "https://ok.example.org/" not in message.body


@pytest.mark.engines("moto")
def test_a_failing_source_of_disabled_endpoints_costs_its_lines_not_the_email(ddb, settings):
    """A receiver of the hook that fails is logged and skipped: the others' endpoints are
    still listed and the e-mail goes out."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    staff_user("sup1", "supervisor", email="sup1@example.org")
    endpoint = webhook_register("acme", URL, events=("pledge.recorded",), actor=staff_actor())
    disable(endpoint, days_ago=2, last_success_days_ago=None)

    def broken(sender, **kwargs):
        raise RuntimeError("the database went away")

    disabled_endpoints_asked.connect(broken, dispatch_uid="test.broken")
    try:
        digest_send(store=AS_SYSTEM.store)
    finally:
        disabled_endpoints_asked.disconnect(dispatch_uid="test.broken")
    [message] = mail.outbox
    assert f"  - E{endpoint.pk} of tenant acme: {URL}, disabled " in message.body
