"""An endpoint's Deliveries page (``/acks/<id>/``): its attempts from the attempt log,
newest first, filtered by the URL, paged with "Load more", as an audited CSV; a pledge's
attempts on its pledge page; every staff role reads them; bad input answers 400."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.tenancy.delivery_log import ATTEMPT_CSV_COLUMNS, PAGE_SIZE
from dashboard.tenancy.management.commands.dispatch_acks import attempt_recorded
from dashboard.tenancy.models import DeliveryAttempt, WebhookEndpoint
from dashboard.tenancy.tenant_changes import webhook_register
from reconciliation.acks.models import AttemptResult, event_id
from reconciliation.actors import command_actor
from tests.dashboard.dispatch import dispatch_acks
from tests.helpers import audit_events, sign_in
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def answer(target, *, headers, body, **kwargs) -> AttemptResult:
    if target.host == "down.example.org":
        return AttemptResult(503, duration_ms=41.0)
    return AttemptResult(204, duration_ms=7.0)


def register(host: str) -> WebhookEndpoint:
    return webhook_register(
        "acme", f"https://{host}/h", events=("pledge.recorded",), actor=command_actor("t")
    )


def dispatch() -> None:
    dispatch_acks(answer, on_attempt=attempt_recorded)


def logged(endpoint: WebhookEndpoint, n: int, *, ok: bool = False) -> list[DeliveryAttempt]:
    """``n`` attempts to ``endpoint``, a minute apart, the newest a minute ago."""
    now = timezone.now()
    return [
        DeliveryAttempt.objects.create(
            endpoint=endpoint,
            tenant="acme",
            intent_id=f"acme#k-{i:03d}",
            event_type="pledge.recorded",
            webhook_id=event_id(f"acme#k-{i:03d}", "pledge.recorded"),
            at=now - timedelta(minutes=n - i),
            code=204 if ok else 500,
            ok=ok,
        )
        for i in range(n)
    ]


def test_the_page_lists_each_attempt_with_its_answer_and_links_the_pledge(ddb, client):
    """Two pledges to an endpoint answering 503: both attempts, newest first, with the
    event, the pledge (linked), HTTP 503, the duration and the webhook-id; the
    Acknowledgements page links to it; auditors read it too, and see no resend form."""
    down = register("down.example.org")
    submit("dl-1")
    submit("dl-2")
    dispatch()

    sign_in(client, "auditor")
    assert f'href="/acks/{down.pk}/"' in client.get("/acks/").content.decode()
    page = client.get(f"/acks/{down.pk}/")
    html = page.content.decode()

    assert page.status_code == 200
    assert html.count('<tr class="attempt failed">') == 2
    assert 'href="/pledges/acme/dl-1/#deliveries"' in html
    assert 'href="/pledges/acme/dl-2/#deliveries"' in html
    assert "HTTP 503" in html and "41&nbsp;ms" in html
    assert event_id("acme#dl-1", "pledge.recorded") in html
    assert "Resend failed deliveries" not in html and "Send again…" not in html
    sign_in(client, "finance_staff")
    staff_page = client.get(f"/acks/{down.pk}/").content.decode()
    assert staff_page.count("Send again…") == 2 and "Resend failed deliveries" not in staff_page


def test_filters_narrow_the_attempts_and_a_bad_filter_answers_400(ddb, staff_client):
    """Outcome, client key and time narrow the list; an unknown outcome, a time window
    that ends before it starts, a cursor the page did not make and an unknown format
    answer 400; an unknown endpoint 404."""
    up = register("crm.example.org")
    submit("fl-1")
    submit("fl-2")
    dispatch()
    base = f"/acks/{up.pk}/"

    assert (
        staff_client.get(base + "?outcome=succeeded").content.decode().count('class="attempt"') == 2
    )
    failed = staff_client.get(base + "?outcome=failed").content.decode()
    assert "No attempt matches these filters" in failed
    one = staff_client.get(base + "?key=fl-2").content.decode()
    assert "/pledges/acme/fl-2/" in one and "/pledges/acme/fl-1/" not in one
    later = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No attempt matches" in staff_client.get(base + f"?since={later}").content.decode()

    for bad in (
        "?outcome=maybe",
        "?since=2026-12-05T10:00&until=2026-12-05T09:00",
        "?before=x.1",
        "?key=a%00b",
    ):
        response = staff_client.get(base + bad)
        assert response.status_code == 400, bad
        assert 'class="attempt' not in response.content.decode()
    assert staff_client.get(base + "?format=xml").status_code == 400
    assert staff_client.get("/acks/999999/").status_code == 404


def test_pages_follow_one_another_without_gap_or_overlap(ddb, staff_client):
    """More attempts than a page: the first page holds the newest ``PAGE_SIZE`` and a
    "Load more" link; following it (as htmx does) gives the rest, and no further link."""
    endpoint = register("crm.example.org")
    rows = logged(endpoint, PAGE_SIZE + 7)

    first = staff_client.get(f"/acks/{endpoint.pk}/").content.decode()
    shown = [r.client_key for r in rows if f"/pledges/acme/{r.client_key}/" in first]
    assert shown == [r.client_key for r in rows[7:]]
    more_url = first.split('id="load-more"')[1].split('href="')[1].split('"')[0]
    rest = staff_client.get(more_url.replace("&amp;", "&"), HTTP_HX_REQUEST="true").content.decode()

    assert "<h1>" not in rest  # the rows alone, for the table
    assert [r.client_key for r in rows if f"/pledges/acme/{r.client_key}/" in rest] == [
        r.client_key for r in rows[:7]
    ]
    assert "load-more" not in rest


def test_the_csv_holds_the_filtered_attempts_and_is_audited(ddb, client):
    """``?format=csv&outcome=failed``: the failed attempts only, one line each with the
    time, event, pledge, webhook-id, status and duration, streamed, never cached, and an
    ``export_downloaded`` event naming the endpoint and the filter."""
    endpoint = register("crm.example.org")
    logged(endpoint, 3)
    logged(endpoint, 2, ok=True)
    user = sign_in(client)

    response = client.get(f"/acks/{endpoint.pk}/?outcome=failed&format=csv")

    assert response.status_code == 200 and response.streaming
    assert "no-store" in response["Cache-Control"]
    body = b"".join(response.streaming_content).decode()
    reader = csv.DictReader(io.StringIO(body))
    assert tuple(reader.fieldnames or ()) == ATTEMPT_CSV_COLUMNS
    lines = list(reader)
    assert [r["client_key"] for r in lines] == ["k-002", "k-001", "k-000"]
    assert {(r["outcome"], r["http_status"], r["event_type"]) for r in lines} == {
        ("failed", "500", "pledge.recorded")
    }
    assert lines[0]["webhook_id"] == event_id("acme#k-002", "pledge.recorded")
    [event] = audit_events(ddb, f"EXPORT#{response['X-Audit-Export-Id']}")
    assert event["action"] == "export_downloaded"
    assert event["actor"]["username"] == user.username
    assert event["detail"]["list"] == "deliveries"
    assert event["detail"]["name"] == f"E{endpoint.pk}"
    assert event["detail"]["filters"] == {"outcome": "failed"}


def test_the_pledge_page_lists_the_pledges_attempts(ddb, auditor_client):
    """A pledge sent to two endpoints: its page lists both attempts, each with its
    endpoint (linked to its Deliveries page) and answer; another pledge's are not there."""
    down, up = register("down.example.org"), register("crm.example.org")
    submit("pa-1")
    submit("pa-2")
    dispatch()

    html = auditor_client.get("/pledges/acme/pa-1/").content.decode()
    section = html.split('id="attempts-h"')[1]

    assert section.count('<tr class="attempt') == 2
    assert f'href="/acks/{down.pk}/"' in section and f'href="/acks/{up.pk}/"' in section
    assert "HTTP 503" in section and "HTTP 204" in section
    assert DeliveryAttempt.objects.filter(intent_id="acme#pa-2").count() == 2
