"""An htmx action the server could not answer, or whose answer never arrived, says so on
the page instead of doing nothing (htmx does not swap 5xx answers or network errors)."""

from __future__ import annotations

import pytest

from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_failed_action_is_reported_not_silent(ddb, open_browser, live_server, screenshots):
    case = stuck_case("br-fail")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/cases/{case.case_id}/")
    alerts = page.locator("#messages [role=alert]")
    assert alerts.count() == 0

    page.route(
        "**/assign/",
        lambda route: route.fulfill(
            status=500, body="boom", headers={"X-Request-ID": "req-12345678"}
        ),
    )
    page.get_by_role("button", name="Assign to me").click()
    alerts.first.wait_for()
    text = alerts.first.inner_text()
    assert "could not complete this (HTTP 500)" in text
    assert "req-12345678" in text
    screenshots.save(page, "case-action-failed-1280.png")

    page.unroute("**/assign/")
    page.route("**/assign/", lambda route: route.abort("connectionreset"))
    page.get_by_role("button", name="Assign to me").click()
    page.wait_for_function("document.querySelectorAll('#messages [role=alert]').length == 2")
    assert "could not be reached, or its answer was lost" in alerts.nth(1).inner_text()
    # The case itself was never touched: the page still offers the same action.
    assert page.get_by_role("button", name="Assign to me").is_visible()
