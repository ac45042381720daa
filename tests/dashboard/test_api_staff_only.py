"""The staff pages' middleware (sessions, the signed-in user, messages, time zone,
htmx, second factor, idle timeout, staff sessions, static files) does not run on the
intake API, which authenticates by bearer token; the API keeps its security headers,
and the staff pages keep all of it (dashboard/staff_only.py)."""

from __future__ import annotations

import pytest
from django.core import checks
from django.http import HttpResponse
from django.test import RequestFactory

from dashboard.staff_only import StaffOnly, staff_only
from tests.conftest import pledge_body

pytestmark = pytest.mark.engines("moto")  # HTTP and middleware: no engine semantics

STAFF_ATTRIBUTES = ("session", "user", "_messages", "htmx")


def test_api_requests_touch_no_session_user_or_messages(ddb, api, staff_client):
    """A pledge, a replay, a refusal and a staff browser's cookie on /api/: no session
    read or written, no user loaded, no message store, and no ``Vary: Cookie``."""
    created = api.post("so-1", pledge_body())
    replay = api.post("so-1", pledge_body())
    api.token = "plg_wrong"
    refused = api.post("so-2", pledge_body())
    with_cookie = staff_client.get("/api/v1/pledges/so-1")
    assert (created.status_code, replay.status_code) == (201, 200)
    assert (refused.status_code, with_cookie.status_code) == (401, 401)
    for response in (created, replay, refused, with_cookie):
        request = response.wsgi_request
        assert not [a for a in STAFF_ATTRIBUTES if hasattr(request, a)], response
        assert "Cookie" not in response.get("Vary", ""), response
        assert not response.cookies, response


def test_api_answers_keep_their_security_headers(ddb, api):
    response = api.post("so-3", pledge_body())
    assert response.status_code == 201
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert "no-store" in response["Cache-Control"]
    assert response["X-Request-ID"]
    assert response["Server-Timing"].startswith('ddb;desc="2 calls"')


def test_staff_pages_still_run_the_staff_middleware(staff_client):
    response = staff_client.get("/accounts/profile/")
    request = response.wsgi_request
    assert response.status_code == 200
    assert [a for a in STAFF_ATTRIBUTES if hasattr(request, a)] == list(STAFF_ATTRIBUTES)
    assert request.user.is_authenticated
    assert "Cookie" in response["Vary"]


def test_the_checks_still_find_the_wrapped_middleware():
    """The admin looks for sessions, auth and messages middleware by class: the
    wrappers are subclasses of what they wrap, so it finds them."""
    found = {message.id for message in checks.run_checks(tags=[checks.Tags.admin])}
    assert not found & {"admin.E408", "admin.E409", "admin.E410"}


class _Recorder:
    def __init__(self, get_response):
        self.get_response = get_response
        self.seen: list[str] = []

    def __call__(self, request):
        self.seen.append("call")
        return self.get_response(request)

    def process_view(self, request, view, args, kwargs):
        self.seen.append("view")

    def process_exception(self, request, exception):
        self.seen.append("exception")
        return HttpResponse("handled")


def test_a_staff_only_middleware_is_skipped_on_api_paths_only():
    """On /api/ the request goes straight on and the hooks answer None; elsewhere the
    wrapped middleware and its hooks run."""
    wrapper = staff_only(_Recorder)(lambda request: HttpResponse("view"))
    assert isinstance(wrapper, StaffOnly) and isinstance(wrapper, _Recorder)
    assert not hasattr(wrapper, "process_template_response")
    api_request = RequestFactory().get("/api/v1/pledges/k")
    page = RequestFactory().get("/queues/stuck/")
    assert wrapper(api_request).content == b"view"
    assert wrapper.process_view(api_request, None, (), {}) is None
    assert wrapper.process_exception(api_request, ValueError()) is None
    assert wrapper.inner.seen == []
    assert wrapper(page).content == b"view"
    wrapper.process_view(page, None, (), {})
    assert wrapper.process_exception(page, ValueError()).content == b"handled"
    assert wrapper.inner.seen == ["call", "view", "exception"]
