"""The audit page in a real browser: while a search is on its way, the export buttons
below the old results cannot be used (they would export the previous filters)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.helpers import AS_SYSTEM, audit_seed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POINTER = "element => getComputedStyle(element).pointerEvents"


def test_export_buttons_wait_for_the_search_on_its_way(ddb, open_browser, live_server):
    """Clicking CSV while a search ran exported the filters of the results still shown;
    until the new results arrive, the export links and button take no click."""
    audit_seed(6, days=1)
    page = open_browser("auditor")
    page.goto(f"{live_server.url}/audit/")
    csv = page.get_by_role("link", name="CSV", exact=True)
    background = page.get_by_role("button", name="Large export in the background")
    assert csv.evaluate(POINTER) == "auto" and background.evaluate(POINTER) == "auto"

    held = []  # the search's request, answered only when the test says so
    page.route("**/audit/?*", lambda route: held.append(route))
    page.locator("#id_case_id").fill("C-NOSUCHCASE00000")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("form.audit-filters")).to_have_class(re.compile("htmx-request"))
    # htmx marks the form before the browser has issued the request, and the route's
    # callback reaches this thread only while Playwright is waited on: wait for it.
    for _ in range(250):
        if held:
            break
        page.wait_for_timeout(20)
    assert len(held) == 1
    assert csv.evaluate(POINTER) == "none" and background.evaluate(POINTER) == "none"

    held[0].continue_()
    expect(page.locator("form.audit-filters")).not_to_have_class(re.compile("htmx-request"))
    assert "case_id=C-NOSUCHCASE00000" in (csv.get_attribute("href") or "")
    assert csv.evaluate(POINTER) == "auto"


def test_my_exports_fits_a_phone(ddb, open_browser, live_server):
    """At 390 px each export is a card: as a table it was 419-423 px wide."""
    from reconciliation.actors import Actor, Role
    from reconciliation.audit.export.background import export_request
    from reconciliation.audit.filters import AuditFilters, FilterAsk

    auditor = Actor("auditor", Role.AUDITOR, "auditor@example.org")
    filters = AuditFilters.build(FilterAsk(action="case_opened"))
    export_request(filters=filters, fmt="jsonl", actor=auditor, store=AS_SYSTEM.store)
    page = open_browser("auditor", width=390)
    page.goto(f"{live_server.url}/audit/exports/")
    expect(page.get_by_text("In progress")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
