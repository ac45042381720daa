"""Error pages: 400, 403, the CSRF failure, 404 and 500 render in the
site layout with navigation and a way out, with DEBUG off; the machine paths answer JSON."""

from __future__ import annotations

import copy
import json

import pytest
from django.test import Client

from tests.helpers import sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.dashboard.error_urls")]

NAV = 'href="/queues/stuck/"'  # the main navigation a signed-in person sees


@pytest.fixture(autouse=True)
def production(settings):
    settings.DEBUG = False


def in_layout(response) -> str:
    html = response.content.decode()
    assert response["Content-Type"].startswith("text/html")
    assert html.lstrip().lower().startswith("<!doctype html>")
    assert '<a class="brand" href="/">Pledge reconciliation</a>' in html
    assert "/static/css/app.css" in html
    return html


def test_404_in_layout_offers_overview_and_case_search(staff_client):
    """An unknown case address answers 404 in the layout, with the navigation, a link to
    the overview and the case search prefilled with what was typed."""
    response = staff_client.get("/cases/NOPE-123/")
    assert response.status_code == 404
    html = in_layout(response)
    assert NAV in html and "Sign out" in html
    assert '<a href="/">Go to the overview</a>' in html
    assert 'action="/cases/"' in html and 'name="q" value="NOPE-123"' in html
    assert response["X-Request-ID"] in html


def test_404_signed_out_offers_sign_in(client):
    """A signed-out visitor on an unknown address is offered the sign-in page."""
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    html = in_layout(response)
    assert 'href="/accounts/login/">Sign in</a>' in html and NAV not in html


def test_403_names_the_role_and_the_way_out(client):
    """Finance staff on a supervisor page get 403 in the layout naming the role the page
    is for, asking a supervisor for it, with the overview and sign-out offered."""
    sign_in(client, "finance_staff", username="fin")
    response = client.get("/drill/")
    assert response.status_code == 403
    html = in_layout(response)
    assert NAV in html
    assert "<strong>fin</strong> (finance staff)" in html
    assert "This page is for: supervisor." in html
    assert "ask a supervisor to give your account that role" in html
    assert '<a href="/">Go to the overview</a>' in html
    assert 'action="/accounts/logout/"' in html
    assert response["Cache-Control"] == "no-store, private"


def test_403_without_a_role_says_so(client):
    """A signed-in account in no staff group is told it has no role yet."""
    sign_in(client, None, username="newcomer")
    response = client.get("/")
    assert response.status_code == 403
    html = in_layout(response)
    assert "has no staff role yet" in html and "a staff role" in html


def test_signed_out_is_sent_to_sign_in_not_refused(client):
    """A signed-out person on a staff page is redirected to sign in, never shown a 403."""
    for path in ("/drill/", "/", "/approvals/", "/audit/"):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/?next="), path


def test_exception_in_a_view_answers_the_500_page_not_a_traceback():
    """A bug in a view answers the 500 page in the layout, with the navigation and the
    correlation id the response carries, and no traceback."""
    client = Client(raise_request_exception=False)
    sign_in(client, "finance_staff")
    response = client.get("/boom/", HTTP_X_REQUEST_ID="req-abcdef-12345")
    assert response.status_code == 500
    html = in_layout(response)
    assert NAV in html
    assert "Something went wrong on our side" in html
    assert response["X-Request-ID"] == "req-abcdef-12345"
    assert '<code class="mono">req-abcdef-12345</code>' in html
    assert "Traceback" not in html and "a bug in a view" not in html


def test_500_renders_when_the_template_context_is_broken(settings):
    """With a context processor failing (its store down), the 500 page still renders in
    the layout, from nothing but the correlation id."""
    templates = copy.deepcopy(settings.TEMPLATES)
    templates[0]["OPTIONS"]["context_processors"].append(
        "tests.dashboard.error_urls.broken_context"
    )
    settings.TEMPLATES = templates
    client = Client(raise_request_exception=False)
    response = client.get("/boom/")
    assert response.status_code == 500
    html = in_layout(response)
    assert "Something went wrong on our side" in html
    assert response["X-Request-ID"] in html
    assert '<a href="/">Go to the overview</a>' in html


def test_400_in_layout(staff_client):
    """A malformed request answers 400 in the layout with a way back."""
    response = staff_client.get("/suspicious/")
    assert response.status_code == 400
    html = in_layout(response)
    assert NAV in html and "nothing was recorded" in html


def test_csrf_failure_in_layout_says_nothing_was_recorded():
    """A form without a valid CSRF token answers 403 in the layout, saying nothing was
    recorded and how to go on; signed out, it offers sign-in."""
    client = Client(enforce_csrf_checks=True)
    sign_in(client, "finance_staff")
    response = client.post("/cases/bulk/", {"action": "assign_me"})
    assert response.status_code == 403
    html = in_layout(response)
    assert NAV in html and "This form has expired" in html and "nothing was recorded" in html
    signed_out = Client(enforce_csrf_checks=True)
    response = signed_out.post("/accounts/login/", {"username": "a", "password": "b"})
    assert response.status_code == 403
    assert 'href="/accounts/login/">Sign in</a> again' in in_layout(response)


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("get", "/api/v1/nope", 404, "not_found"),
        ("get", "/api/v1/boom", 500, "internal_error"),
        ("get", "/metrics/extra", 404, "not_found"),
        ("get", "/healthz/", 404, "not_found"),
    ],
)
def test_machine_paths_answer_json_never_html(method, path, status, code):
    """The API, /metrics and /healthz answer errors as JSON with the correlation id."""
    client = Client(raise_request_exception=False)
    response = getattr(client, method)(path)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert body["error"] == code and body["correlation_id"] == response["X-Request-ID"]


def test_a_refusal_is_one_log_line_without_a_traceback(staff_client, caplog):
    """A 403 is an expected answer, not an error: one warning line naming the path and
    the account, never a stack trace (each refusal wrote two full tracebacks)."""
    with caplog.at_level("INFO"):
        response = staff_client.get("/approvals/")
    assert response.status_code == 403
    lines = [r for r in caplog.records if "/approvals/" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].exc_info is None
    assert lines[0].levelname == "WARNING"
    assert all(r.exc_info is None for r in caplog.records)


def test_favicon_ico_is_the_site_icon(client):
    """Browsers and monitors ask for /favicon.ico whatever the page links: never a 404."""
    response = client.get("/favicon.ico")
    assert response.status_code in (301, 302)
    assert response["Location"].endswith("favicon.svg")
