"""Keyboard shortcuts in a real browser (static/js/keys.js): "?" lists them,
"j"/"k" move the selection in a queue and Enter opens the selected case, "a" assigns it
to me there, "/" focuses the search, and letters typed into a field stay in the field."""

from __future__ import annotations

import re

import pytest

from reconciliation import clock
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_keys_move_open_assign_and_list_themselves(ddb, open_browser, live_server):
    """In the stuck queue (oldest first): "?" opens the list of shortcuts and Escape
    closes it; j, j, k selects the first row again and Enter opens its case; "a" takes
    the case; "/" focuses the search box, where "j" is typed, not acted on."""
    with clock.travel(-2 * 3600):
        first = stuck_case("kb-first")
    with clock.travel(-3600):
        stuck_case("kb-second")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/queues/stuck/")
    page.wait_for_selector("table.queue-table tbody tr")
    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    assert dialog.is_visible() and dialog.get_by_text("Open the selected case").is_visible()
    page.keyboard.press("Escape")
    assert not dialog.is_visible()
    selected = page.locator("tr.kbd-selected td.case-id")
    page.keyboard.press("j")
    assert selected.inner_text() == first.case_id
    page.keyboard.press("j")
    assert selected.inner_text() != first.case_id
    page.keyboard.press("k")
    assert selected.inner_text() == first.case_id
    # Enter on a focused link or button keeps its own meaning (keys.js): the page's
    # focus is on nothing before Enter opens the selected row.
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/cases/{first.case_id}/$"))
    page.keyboard.press("a")
    page.get_by_role("button", name="Unassign me").wait_for()
    page.keyboard.press("/")
    box = page.get_by_role("searchbox", name=re.compile("Find a case"))
    page.keyboard.type("jk")
    assert box.input_value() == "jk"
    assert page.url.endswith(f"/cases/{first.case_id}/")
