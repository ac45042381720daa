"""Error pages and the overview's Needs attention block in a real browser: in the
layout, readable at 1280 and 800 px, each with a way out that works. An error page is
where staff land when something went wrong; one that strands them turns a refused
request into a lost session."""

from __future__ import annotations

import pytest

from reconciliation import clock
from reconciliation.casework.overview import overview_summary_refresh
from reconciliation.stores import every_store
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shoot(page, camera, name: str) -> None:
    """Nothing wider than the window: no sideways scrolling at 800 px either."""
    for width, (scroll, _client) in camera.shoot(page, name).items():
        assert scroll <= width, (name, width, scroll)


def test_error_pages_offer_a_way_out(ddb, open_browser, live_server, screenshots, settings):
    """Finance staff on a supervisor page see the 403 page with the navigation and follow
    "Go to the overview", where a case past SLA is flagged; an unknown case address shows
    the 404 page with the search prefilled."""
    settings.DEBUG = False
    settings.QUEUE_SLA_HOURS = "stuck=1"
    with clock.travel(-2 * 3600):
        old = stuck_case("br-sla")
    # The overview's summary as the worker leaves it: no view computes it.
    overview_summary_refresh(stores=every_store())
    page = open_browser("staff")
    response = page.goto(f"{live_server.url}/drill/")
    assert response.status == 403
    assert page.get_by_role("heading", name="This page is not open to your role").is_visible()
    assert page.get_by_role("navigation", name="Main").is_visible()
    shoot(page, screenshots, "error-403")
    page.get_by_role("link", name="Go to the overview").click()
    page.wait_for_url(f"{live_server.url}/")
    attention = page.locator("section.attention")
    assert "past the 1 h SLA" in attention.inner_text()
    shoot(page, screenshots, "overview-needs-attention")
    attention.get_by_role("link", name=old.case_id).click()
    page.wait_for_url(f"{live_server.url}/cases/{old.case_id}/")

    response = page.goto(f"{live_server.url}/cases/C-AAAAAAAAAAAAAAAA/")
    assert response.status == 404
    assert page.get_by_label("Search cases").input_value() == "C-AAAAAAAAAAAAAAAA"
    shoot(page, screenshots, "error-404")
