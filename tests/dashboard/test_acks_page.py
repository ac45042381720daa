"""The Acknowledgements page (``/acks/``): per tenant its endpoints (URL, events,
enabled, registered), their failure rate and last success, from counters the dispatcher
updates after each attempt (one SQL increment each, no scan of pledges)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.tenancy.management.commands.dispatch_acks import (
    attempt_counted,
    breaker_noted,
)
from dashboard.tenancy.models import WebhookEndpoint
from dashboard.tenancy.tenant_changes import webhook_register
from reconciliation import clock
from reconciliation.acks.models import AttemptResult
from reconciliation.actors import command_actor
from tests.dashboard.dispatch import dispatch_acks
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def answer(target, *, headers, body, **kwargs) -> AttemptResult:
    return AttemptResult(503 if target.host == "down.example.org" else 204)


def test_the_dispatcher_counts_each_attempt_and_the_page_shows_rate_and_last_success(
    ddb, auditor_client
):
    """Two pledges to two endpoints of acme: the one answering 503 shows a 100 % failure
    rate and no success, the one answering 204 0 % and its last success; a tenant with no
    attempt yet says so. Reading the page is one query of endpoints, whatever the pledges."""
    actor = command_actor("test")
    down = webhook_register(
        "acme", "https://down.example.org/h", events=("pledge.recorded",), actor=actor
    )
    up = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=actor
    )
    webhook_register("other", "https://other.example.org/h", events=("pledge.voided",), actor=actor)
    submit("ap-1")
    submit("ap-2")

    dispatch_acks(answer, on_attempt=attempt_counted)

    down.refresh_from_db()
    up.refresh_from_db()
    assert (down.attempts, down.failures, down.last_success_at) == (2, 2, None)
    assert down.last_failure_at is not None and down.failure_rate == 1.0
    assert (up.attempts, up.failures, up.failure_rate) == (2, 0, 0.0)
    assert up.last_success_at is not None and up.last_failure_at is None

    with CaptureQueriesContext(connection) as queries:
        page = auditor_client.get("/acks/")
    html = page.content.decode()
    assert page.status_code == 200
    assert sum("dashboard_webhookendpoint" in q["sql"] for q in queries.captured_queries) == 1
    down_part, up_part = html.split("down.example.org")[1], html.split("crm.example.org")[1]
    assert "100&nbsp;%" in down_part.split("Last failure")[0]
    assert "0&nbsp;%" in up_part.split("Last failure")[0]
    assert '<dt>Last success</dt><dd><span class="muted">never</span>' in down_part
    assert "<dt>Last success</dt><dd><time" in up_part
    assert "Tenant <code>other</code>" in html and "no attempt yet" in html
    assert "<code>pledge.voided</code>" in html and "Enabled" in html
    for endpoint in WebhookEndpoint.objects.all():
        assert endpoint.secret not in html


def test_counting_is_an_increment_not_a_read_and_write(ddb):
    """Two dispatchers counting from the same stale row lose nothing (``F()``); an id
    that is not an endpoint's counts nothing and raises nothing."""
    from django.utils import timezone

    endpoint = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    now = timezone.now()
    WebhookEndpoint.attempt_count(f"E{endpoint.pk}", ok=False, at=now)
    WebhookEndpoint.attempt_count(f"E{endpoint.pk}", ok=True, at=now)
    WebhookEndpoint.attempt_count("bogus", ok=True, at=now)
    endpoint.refresh_from_db()
    assert (endpoint.attempts, endpoint.failures) == (2, 1)
    assert endpoint.last_success_at == now


def test_the_page_with_no_endpoint_says_how_to_register_one(staff_client):
    html = staff_client.get("/acks/").content.decode()
    assert "No tenant has registered an acknowledgement endpoint" in html


def test_an_endpoint_paused_by_its_breaker_says_so_on_the_page(ddb, auditor_client, settings):
    """An endpoint answering 500: after ``ACK_BREAKER_FAILURES`` failed attempts in a row
    its breaker opens; the dispatcher writes it to the row (``breaker_noted``), the page
    says it is paused, until when and why, and every dispatcher reading the row defers
    its deliveries (``paused_until``) with no attempt spent."""
    settings.ACK_BREAKER_FAILURES = 2
    actor = command_actor("test")
    down = webhook_register(
        "acme", "https://down.example.org/h", events=("pledge.recorded",), actor=actor
    )
    for n in range(4):
        submit(f"br-{n}")
    report = dispatch_acks(
        answer,
        on_attempt=attempt_counted,
        on_breaker=breaker_noted,
        workers=0,  # one at a time: the breaker opens after exactly two
    )
    assert (report.failed, report.deferred) == (2, 2)
    down.refresh_from_db()
    assert down.breaker_open and down.breaker_failures == 2
    assert down.as_endpoint().paused_until == down.breaker_until

    html = auditor_client.get("/acks/").content.decode()
    assert "Paused by its circuit breaker" in html
    assert "<strong>Paused</strong> until" in html and "after 2 failed attempts in a row" in html
    assert "at most 8 requests at once, no rate limit" in html

    # Another dispatcher (fresh gates) reads the row: it sends nothing while paused.
    submit("br-late")
    later = dispatch_acks(answer, on_breaker=breaker_noted)
    assert (later.failed, later.deferred) == (0, 1)

    # After the pause a dispatcher whose own breaker never opened (the one that opened
    # it may be gone) is answered: the row's breaker is closed, the page says so.
    with clock.travel(settings.ACK_BREAKER_OPEN_S + 1):
        dispatch_acks(lambda target, **kwargs: AttemptResult(204), on_attempt=attempt_counted)
        down.refresh_from_db()
        assert (down.breaker_state, down.breaker_until, down.breaker_failures) == (
            "CLOSED",
            None,
            0,
        )
        html = auditor_client.get("/acks/").content.decode()
    assert "Paused by its circuit breaker" not in html and "<dd>Sending</dd>" in html


def test_delivery_limits_are_set_in_the_admin_audited(ddb, client):
    """A superuser sets an endpoint's limits on its admin page: saved, with a
    ``webhook_limits_set`` audit event naming them before and after; the rest of the
    page stays read-only."""
    from tests.dashboard.test_rotate_webhook_secret import superuser_client
    from tests.helpers import audit_events

    endpoint = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    client = superuser_client(client)
    page = f"/admin/tenancy/webhookendpoint/{endpoint.pk}/change/"
    assert 'name="max_in_flight"' in client.get(page).content.decode()
    answer_ = client.post(page, {"max_in_flight": "3", "rate_per_s": "1.5"})
    assert answer_.status_code == 302, answer_.content.decode()[:2000]
    endpoint.refresh_from_db()
    assert (endpoint.max_in_flight, endpoint.rate_per_s) == (3, 1.5)
    [event] = [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "webhook_limits_set"]
    assert event["before"]["max_in_flight"] == 8 and event["after"]["rate_per_s"] == "1.5"


def test_a_run_of_attempts_is_counted_in_one_update_as_one_by_one(ddb):
    """A dispatcher tells the edge its attempts in runs: one UPDATE per endpoint counts a
    run as counting each would: attempts and failures added, the latest success and
    failure kept, and a pause over by a success closed (here the first success falls in
    the pause, the second after it)."""
    from datetime import timedelta

    actor = command_actor("test")
    one = webhook_register(
        "acme", "https://a.example.org/h", events=("pledge.recorded",), actor=actor
    )
    run = webhook_register(
        "acme", "https://b.example.org/h", events=("pledge.recorded",), actor=actor
    )
    now = clock.now()
    paused = {"breaker_state": "OPEN", "breaker_until": now + timedelta(seconds=5)}
    WebhookEndpoint.objects.filter(pk__in=[one.pk, run.pk]).update(breaker_failures=3, **paused)
    attempts = [
        (False, now),
        (True, now + timedelta(seconds=1)),
        (False, now + timedelta(seconds=2)),
        (True, now + timedelta(seconds=6)),
        (False, now + timedelta(seconds=7)),
    ]
    for ok, at in attempts:
        WebhookEndpoint.attempt_count(f"E{one.pk}", ok=ok, at=at)
    with CaptureQueriesContext(connection) as queries:
        WebhookEndpoint.attempts_count(f"E{run.pk}", attempts)
    assert len(queries.captured_queries) == 1

    fields = (
        "attempts failures last_success_at last_failure_at"
        " breaker_state breaker_until breaker_failures"
    ).split()
    one.refresh_from_db()
    run.refresh_from_db()
    assert [getattr(run, f) for f in fields] == [getattr(one, f) for f in fields]
    assert (run.attempts, run.failures, run.breaker_state) == (5, 3, "CLOSED")
