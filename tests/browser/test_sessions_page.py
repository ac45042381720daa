"""The profile's sessions in a browser: each role signed in twice sees both
sessions, this one marked; the profile photographed at 1280 and 390 px (under
test-results/screenshots/sessions/), the list not scrolling sideways; "Sign out the others"
asks first (a page of its own, no script needed) and, confirmed, sends the other browser
to the sign-in page."""

from __future__ import annotations

import pytest

from tests.browser.conftest import WIDE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = 390


@pytest.mark.parametrize("username", ["staff", "supervisor", "auditor"])
def test_profile_sessions_for_each_role(ddb, open_browser, live_server, screenshots, username):
    other = open_browser(username)
    for width in (WIDE, PHONE):
        page = open_browser(username, width=width)
        page.goto(f"{live_server.url}/accounts/profile/")
        rows = page.locator("table.sessions tbody tr")
        assert rows.count() >= 2
        assert page.locator("table.sessions tr[aria-current=true]").count() == 1
        screenshots.save(page, f"sessions/{username}-profile-{width}.png")
        # The list itself fits the width (the header's own fit is test_screenshots.py's).
        scroll, client = page.evaluate(
            "(() => { const t = document.querySelector('table.sessions').parentElement;"
            " return [t.scrollWidth, t.clientWidth]; })()"
        )
        assert scroll <= client, f"the sessions list scrolls sideways at {width} px"

    page.get_by_role("button", name="Sign out the others…").click()
    page.wait_for_load_state()
    # The browser is asked first, by the server (no script): nothing has ended yet.
    assert page.get_by_role("heading", name="Sign out your other sessions?").is_visible()
    screenshots.save(page, f"sessions/{username}-confirm-{PHONE}.png")
    other.goto(f"{live_server.url}/accounts/profile/")
    assert "/accounts/login/" not in other.url
    page.get_by_role("button", name="Sign out the others", exact=True).click()
    page.wait_for_load_state()
    assert page.locator("table.sessions tbody tr").count() == 1
    other.goto(f"{live_server.url}/accounts/profile/")
    assert "/accounts/login/" in other.url
