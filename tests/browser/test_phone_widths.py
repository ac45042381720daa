"""Lists on a phone and a long reason on a wide screen: at 390 px no page is wider than
the window (the overview measured 482 px) and a case id stays on one line (queue ids
broke every 4 characters); at 1280 px the Cancelled queue's reason is cut short with the
whole text on hover, instead of running over the next columns. A column behind a
sideways scroll goes unread, and an id split across lines cannot be read or compared at
a glance."""

from __future__ import annotations

import pytest

from reconciliation.casework.dispositions import case_dispose
from tests.helpers import acting
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = 390
PAGES = (
    "/",
    "/queues/stuck/",
    "/queues/cancelled/",
    "/queues/resolved/",
    "/queues/mine/",
    "/worklist/",
    "/cases/?q=acme",
)


def slug(path: str) -> str:
    """A page's path as a picture's file name."""
    return "".join(c if c.isalnum() else "-" for c in path.strip("/")) or "overview"


def widths(page) -> tuple[int, int]:
    return tuple(
        page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
    )


def fits(page, path: str) -> None:
    """The page is no wider than the window, and no column hides behind a sideways
    scroll: every table fits its box."""
    scroll, client = widths(page)
    assert scroll <= client, f"{path}: {scroll} px wide in a {client} px window"
    for inner, box in page.evaluate(
        "[...document.querySelectorAll('.table-wrap')].map(w => [w.scrollWidth, w.clientWidth])"
    ):
        assert inner <= box, f"{path}: a table {inner} px wide in {box} px"


def one_line(page, selector: str) -> list[tuple[str, float, float]]:
    """Each element's text, height and line height: one line when the height is under
    one and a half lines."""
    return [
        (
            cell.inner_text(),
            cell.evaluate("e => e.getBoundingClientRect().height"),
            cell.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"),
        )
        for cell in page.locator(selector).all()
    ]


def test_no_page_wider_than_a_phone(ddb, open_browser, live_server, screenshots):
    """At 390 px the overview and the lists with rows fit the window (each list a column
    of cards), every case id is whole on one line and no amount wraps; at 1280 px the
    same pages fit too."""
    long_key = "order-with-a-rather-long-client-key-2026-12-03-0001"
    stuck_case(long_key, amount="1234567.89", fund="BUILDING", donor_ref="D-1")
    stuck_case("p-2", amount="75.00")
    key_reuse_case(ddb, "p-3-a-longer-client-key-for-the-cancelled-queue")
    done = ambiguous_case("p-4")
    case_dispose(
        disposition="CONFIRMED_COMMITTED",
        **acting("staff").on(
            done, reason_code="EVIDENCE_CONFIRMS", reason_text="The pledge read back is there."
        ),
    )
    page = open_browser("staff", width=PHONE)
    for path in PAGES:
        page.goto(f"{live_server.url}{path}")
        screenshots.save(page, f"phone-{slug(path)}.png")
        fits(page, path)
        for text, height, line in one_line(page, "td.case-id a"):
            assert height < 1.5 * line, f"{path}: case id {text!r} wraps ({height} px)"
        for link in page.locator("td.case-id a").all():  # whole, not cut short
            assert link.evaluate("e => e.scrollWidth <= e.clientWidth"), path
        for amount in page.locator("#results td.num").all():
            height = amount.evaluate("e => e.getBoundingClientRect().height")
            line = amount.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
            assert height < 2.5 * line, f"{path}: amount {amount.inner_text()!r} wraps"
    page.set_viewport_size({"width": 1280, "height": 900})
    for path in PAGES:  # and the same pages on a wide screen
        page.goto(f"{live_server.url}{path}")
        screenshots.save(page, f"wide-{slug(path)}.png")
        fits(page, path)


def test_cancelled_reason_cut_short_at_1280(ddb, open_browser, live_server, screenshots):
    """At 1280 px the Reason cell stays inside its column (ellipsis), its whole text in
    the title, and the page is no wider than the window."""
    case = key_reuse_case(ddb, "p-5")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/queues/cancelled/")
    screenshots.save(page, "cancelled-1280.png")
    cell = page.locator("td.reason").first
    full = cell.get_attribute("title")
    assert full and len(full) >= len(cell.inner_text().strip())
    # The text is cut inside its cell: what does not fit is hidden behind an ellipsis.
    text = cell.locator(".reason-text")
    assert text.evaluate("e => getComputedStyle(e).textOverflow") == "ellipsis"
    assert text.evaluate("e => getComputedStyle(e).overflowX") == "hidden"
    cell_box = cell.bounding_box()
    text_box = text.bounding_box()
    assert text_box["x"] + text_box["width"] <= cell_box["x"] + cell_box["width"] + 1
    assert cell_box["width"] <= 24 * 16, f"the Reason column is {cell_box['width']} px wide"
    scroll, client = widths(page)
    assert scroll <= client
    assert page.locator("td.case-id a").first.inner_text() == case.case_id
