"""A screen that stays true: after an htmx action the queue page's header (open count,
amount at risk) and its tab counts say what the table shows, without a reload, so staff
never triage by a count the table beside it already contradicts."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_bulk_action_refreshes_the_counts_without_a_reload(ddb, open_browser, live_server):
    """Escalating two of three stuck cases in bulk: the table shows one row, and the
    header's open count, the amount at risk and both tabs' counts follow it, in the same
    page (no reload)."""
    stuck_case("fresh-1", amount="20.00")
    stuck_case("fresh-2", amount="500.00")
    kept = stuck_case("fresh-3", amount="75.00")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/queues/stuck/")
    header = page.locator("p.at-risk")
    assert "Stuck claims: 3 open" in header.inner_text()
    assert "595.00" in header.inner_text()
    tabs = page.get_by_role("navigation", name="Queues")
    assert tabs.get_by_role("link", name=re.compile(r"^Stuck claims 3")).is_visible()
    assert tabs.get_by_role("link", name=re.compile(r"^Escalated 0")).is_visible()
    page.evaluate("window.__sameDocument = true")

    for box in page.locator('input[name="case_ids"]').all():
        if box.get_attribute("value") != kept.case_id:
            box.check()
    page.locator("details.bulk summary").click()
    page.get_by_label("Apply to the selected cases").select_option("ESCALATE")
    page.locator("#bulk-form select[name=reason_code]").select_option("NEEDS_REVIEW")
    page.locator("#bulk-form [name=reason_text]").fill("These need a closer look.")
    page.locator("#bulk-form").get_by_role("button", name="Preview").click()
    page.get_by_role("button", name="Apply to 2 cases").click()
    expect(page.locator("#results tbody tr")).to_have_count(1)
    expect(header).to_contain_text("Stuck claims: 1 open")
    assert page.evaluate("window.__sameDocument === true")  # no reload
    text = header.inner_text()
    assert "Stuck claims: 1 open" in text and "75.00" in text and "595.00" not in text
    assert tabs.get_by_role("link", name=re.compile(r"^Stuck claims 1")).is_visible()
    assert tabs.get_by_role("link", name=re.compile(r"^Escalated 2")).is_visible()
    assert page.locator("#results tbody tr td.case-id").all_inner_texts() == [kept.case_id]
