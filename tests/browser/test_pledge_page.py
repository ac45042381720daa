"""The pledge page and the refused-requests page in a real browser, for each staff role,
at 1280 and 390 px: found from the search, every part of the page shown, and nothing
wider than the window (a 200-character key and a long donor ref included)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.test import Client
from playwright.sync_api import expect

from tests.conftest import pledge_body
from tests.reconciliation.factories import ambiguous_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG_KEY = "order-" + "k" * 194  # an unbroken 200-character key
DONOR = "SYN-" + "9" * 60
SECTIONS = (
    "Pledge",
    "Claim",
    "Ledger",
    "Deliveries",
    "Cases",
    "Intake request log",
    "Audit events of the pledge",
)


def _world() -> None:
    """A pledge whose commit answer was lost (so it has a case; its commit wrote the
    pledge's own request log entry), then a replay, a reused key and a request with no
    key through the real API, their buffered log entries written."""
    from dashboard.tenancy.models import ApiToken
    from reconciliation.claims.request_log_buffer import request_log_flush

    ambiguous_case(LONG_KEY, donor_ref=DONOR)
    _, raw = ApiToken.issue("acme")
    api = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    for key, body in (
        (LONG_KEY, pledge_body(donor_ref=DONOR)),
        (LONG_KEY, pledge_body(donor_ref=DONOR, amount="3.00")),
        (None, pledge_body()),
    ):
        headers = {**auth, **({"HTTP_IDEMPOTENCY_KEY": key} if key else {})}
        api.post(
            "/api/v1/pledges", data=json.dumps(body), content_type="application/json", **headers
        )
    assert request_log_flush().written == 3


@pytest.mark.parametrize("username", ["staff", "supervisor", "auditor"])
def test_the_pledge_page_for_each_role_fits_1280_and_390(ddb, open_browser, live_server, username):
    """Each role finds the pledge by its donor ref in lower case, opens its page from the
    result, sees every part of it, and at 1280 and 390 px the page is no wider than the
    window; the refused-requests page fits a phone too."""
    _world()
    page = open_browser(username)
    page.goto(f"{live_server.url}/cases/?q={DONOR.lower()}")
    page.locator(".pledge-results a").first.click()
    page.wait_for_url(f"{live_server.url}/pledges/acme/**")
    for name in SECTIONS:
        expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()
    # the commit's own entry (written with the pledge), the replay and the 422
    expect(page.locator("#requests li")).to_have_count(3)
    url = f"{live_server.url}/pledges/acme/{quote(LONG_KEY, safe='')}/"
    rejected = f"{live_server.url}/requests/rejected/?tenant=acme"
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for address in (url, rejected):
            page.goto(address)
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, (address, width, scroll)
    expect(page.get_by_text("no key")).to_be_visible()
