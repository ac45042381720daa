"""The worklist in a real browser (docs/worklist.md): finance staff land on it, order it by
amount within currency from the filter form (htmx, the URL follows), save the view, and
the page fits a 390 px phone without sideways scrolling."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from reconciliation import clock
from tests.browser.conftest import WIDE
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = 390


def test_worklist_at_1280_and_390_px(ddb, open_browser, live_server, screenshots):
    """Staff land on the worklist, order it by amount (GBP then USD, largest first in
    each, totals per currency), save the view and find its link; at 390 px nothing
    scrolls sideways."""
    with clock.travel(-3 * 3600):
        stuck_case("bw-usd-453", amount="453.00", currency="USD")
    with clock.travel(-2 * 3600):
        stuck_case("bw-gbp-466", amount="466.00", currency="GBP")
    stuck_case("bw-gbp-10", amount="10.00", currency="GBP")
    page = open_browser("staff")  # waits for the landing page: /worklist/ for staff
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(3)
    keys = page.locator("#results tbody td:nth-child(5)")
    assert keys.all_inner_texts() == ["bw-usd-453", "bw-gbp-466", "bw-gbp-10"]

    page.get_by_label("Order").select_option("amount")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"sort=amount"))
    expect(keys.first).to_have_text("bw-gbp-466")
    assert keys.all_inner_texts() == ["bw-gbp-466", "bw-gbp-10", "bw-usd-453"]
    totals = page.locator("#results tfoot tr.total")
    expect(totals).to_have_count(2)
    assert "Total GBP: 2 cases" in totals.first.inner_text()
    screenshots.save(page, f"worklist-{WIDE}.png")

    page.get_by_label("Name this view").fill("Largest first")
    page.get_by_role("button", name="Save these filters").click()
    link = page.get_by_role("link", name="Largest first")
    expect(link).to_have_attribute("href", "/worklist/?sort=amount")

    page.set_viewport_size({"width": PHONE, "height": 800})
    expect(rows).to_have_count(3)
    width = page.evaluate("document.documentElement.scrollWidth")
    screenshots.save(page, f"worklist-{PHONE}.png")
    assert width <= PHONE, f"the worklist is {width} px wide at {PHONE} px"
