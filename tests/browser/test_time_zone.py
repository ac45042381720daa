"""A staff member sets their time zone on the profile page; pages then show their local
time, with the exact UTC instant on hover and, on the case page, beside it."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

UTC_INSTANT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


def test_profile_time_zone_moves_the_case_page_times(ddb, open_browser, live_server, screenshots):
    """Staff choose Asia/Kolkata (UTC+05:30, no summer time); the case page's Opened time
    reads in that zone and its title and the text beside it carry the UTC instant."""
    case = stuck_case("tz-1")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/accounts/profile/")
    page.get_by_label("Time zone", exact=True).select_option("Asia/Kolkata")
    page.get_by_role("button", name="Save time zone").click()
    page.get_by_text("Times now show in Asia/Kolkata.").wait_for()
    screenshots.save(page, "profile-time-zone.png")

    page.goto(f"{live_server.url}/cases/{case.case_id}/")
    opened = page.locator("dt", has_text="Opened").locator("xpath=following-sibling::dd[1]")
    stamp = opened.locator("time")
    instant = stamp.get_attribute("datetime")
    title = stamp.get_attribute("title")
    at = datetime.fromisoformat(instant)
    local = at.astimezone(ZoneInfo("Asia/Kolkata"))
    assert instant.endswith("Z")
    assert "." not in stamp.inner_text() and "." not in title  # people read no microseconds
    assert UTC_INSTANT.match(title) and title == at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert stamp.inner_text().endswith(f"{local:%H:%M} IST")
    assert title in opened.inner_text()  # the exact instant is on the page, not only on hover
    assert page.locator("time:not([title])").count() == 0
    box = stamp.bounding_box()
    assert box is not None and box["height"] < 30  # one line: never wrapped mid-time
    screenshots.save(page, "case-in-kolkata.png")
