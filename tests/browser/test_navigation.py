"""The top navigation on a phone: at 390 px the links fold behind a Menu button (they
took 498-678 px and pushed the search box off-screen); at 1280 px they are all shown."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = 390
HEADER_WIDTH = "document.querySelector('header.topbar').scrollWidth"


@pytest.mark.parametrize("username", ["staff", "supervisor", "auditor"])
def test_the_navigation_is_a_menu_on_a_phone(ddb, open_browser, username):
    page = open_browser(username, width=PHONE)
    menu = page.get_by_role("button", name="Menu")
    audit = page.locator("nav.mainnav").get_by_role("link", name="Audit trail")
    expect(menu).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(audit).to_be_hidden()
    assert page.evaluate(HEADER_WIDTH) <= PHONE

    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(audit).to_be_visible()
    expect(page.get_by_role("searchbox")).to_be_visible()
    box = page.get_by_role("searchbox").bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE
    assert page.evaluate(HEADER_WIDTH) <= PHONE

    page.set_viewport_size({"width": 1280, "height": 900})
    expect(menu).to_be_hidden()
    expect(audit).to_be_visible()
