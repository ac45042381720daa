"""Queue triage in a real browser: sorting a queue by its column headers without a
reload, the amount at risk, the case search from the navigation, the resolved list with
a filter, and "My cases"."""

from __future__ import annotations

import re

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_dispose
from reconciliation.claims.models import pledge_home
from tests.helpers import acting
from tests.reconciliation.factories import ambiguous_case, stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def intents(page) -> list[str]:
    """Each row's intent as ``tenant#key`` (the page shows the tenant, then the key)."""
    return [
        f"{tenant}#{key}"
        for tenant, key in zip(
            page.locator("#results tbody .intent .tenant").all_inner_texts(),
            page.locator("#results tbody .intent code").all_inner_texts(),
            strict=True,
        )
    ]


def test_sorting_a_queue_by_its_headers(ddb, open_browser, live_server, screenshots):
    """Clicking Amount orders the whole queue largest first (htmx, the URL follows),
    clicking again smallest first; Fund orders A–Z; the amount at risk is shown."""
    with clock.travel(-3 * 3600):
        stuck_case("b-old", amount="20.00", fund="BUILDING")
    with clock.travel(-2 * 3600):
        stuck_case("b-mid", amount="500.00", fund="GENERAL")
    stuck_case("b-new", amount="75.00", fund="ARTS")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/queues/stuck/")
    assert intents(page) == ["acme#b-old", "acme#b-mid", "acme#b-new"]
    assert page.locator(".at-risk").get_by_text(re.compile("595")).is_visible()
    page.locator("th a.sort", has_text="Amount").click()
    page.wait_for_url(re.compile(r"sort=amount_desc"))
    page.wait_for_function("document.querySelector('th[aria-sort]') !== null")
    assert intents(page) == ["acme#b-mid", "acme#b-new", "acme#b-old"]
    screenshots.shoot(page, "queue-sorted-by-amount")
    page.locator("th a.sort", has_text="Amount").click()
    page.wait_for_url(re.compile(r"sort=amount$"))
    assert intents(page) == ["acme#b-old", "acme#b-new", "acme#b-mid"]
    page.locator("th a.sort", has_text="Fund").click()
    page.wait_for_url(re.compile(r"sort=fund$"))
    assert intents(page) == ["acme#b-new", "acme#b-old", "acme#b-mid"]


def test_search_from_the_navigation(ddb, open_browser, live_server, screenshots):
    """The search box in the navigation finds a case by donor ref and by the client's
    own key; an empty search says what to type."""
    wanted = stuck_case("order-4242", donor_ref="D-7788")
    page = open_browser("auditor")
    box = page.get_by_role("searchbox", name=re.compile("Find a case"))
    box.fill("D-7788")
    box.press("Enter")
    page.wait_for_url(re.compile(r"/cases/\?q=D-7788"))
    assert page.locator("td.case-id").all_inner_texts() == [wanted.case_id]
    assert page.get_by_text("donor ref").first.is_visible()
    screenshots.shoot(page, "search")
    page.goto(f"{live_server.url}/cases/?q=")
    assert page.get_by_text("Type a case id").is_visible()


def test_resolved_list_and_filter(ddb, open_browser, live_server, screenshots):
    """Resolved cases appear newest first with who and how; filtering by the resolver
    narrows the list in place."""
    why = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "The pledge read back is there."}
    first = ambiguous_case("done-1")
    case_dispose(disposition="CONFIRMED_COMMITTED", **acting("ada").on(first, **why))
    with clock.travel(30):
        second = ambiguous_case("done-2")
        case_dispose(disposition="CONFIRMED_COMMITTED", **acting("bob").on(second, **why))
    page = open_browser("supervisor")
    page.goto(f"{live_server.url}/queues/resolved/")
    assert page.locator("td.case-id").all_inner_texts() == [second.case_id, first.case_id]
    assert page.locator("td.how").first.inner_text().startswith("Confirmed committed")
    screenshots.shoot(page, "resolved")
    page.get_by_label("Resolved by").fill("ada")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"resolved_by=ada"))
    page.wait_for_function("document.querySelectorAll('td.case-id').length === 1")
    assert page.locator("td.case-id").all_inner_texts() == [first.case_id]


def test_my_cases_after_assign_to_me(ddb, open_browser, live_server, screenshots):
    """Finance staff take a case from its page and find it under My cases."""
    case = stuck_case("mine-1")
    page = open_browser("staff")
    page.goto(f"{live_server.url}/cases/{case.case_id}/")
    page.get_by_role("button", name="Assign to me").click()
    page.get_by_role("button", name="Unassign me").wait_for()
    page.get_by_role("link", name="My cases").click()
    page.wait_for_url(f"{live_server.url}/queues/mine/")
    assert page.locator("td.case-id").all_inner_texts() == [case.case_id]
    screenshots.shoot(page, "my-cases")


def test_show_drill_data_checkbox(ddb, open_browser, live_server):
    """A queue holding a real and a drill case lists the real one, counts 1 open and says
    one drill case is not shown; ticking "Show drill data" and applying lists both in
    place (the URL keeps the choice) and the counts above follow, the notice gone."""
    from reconciliation.actors import Actor, Role
    from reconciliation.cases.models import DRILL_TENANT
    from reconciliation.claims import intake
    from reconciliation.claims.request import parse_fields
    from tests import fault_helpers
    from tests.conftest import pledge_body

    real = ambiguous_case("real-b1")
    robot = Actor(username=f"api:{DRILL_TENANT}", role=Role.API, address="127.0.0.1")
    with fault_helpers.injected({"ambiguous_after_commit": 1.0}):
        drill = intake.pledge_submit(
            pledge_home(DRILL_TENANT, "drill-b1"),
            tenant=DRILL_TENANT,
            idempotency_key="drill-b1",
            request=parse_fields(pledge_body()),
            actor=robot,
        )
    page = open_browser("staff")
    page.goto(f"{live_server.url}/queues/ambiguous/")
    assert page.locator("td.case-id").all_inner_texts() == [real.case_id]
    notice = page.locator(".drill-notice")
    assert notice.inner_text() == "1 drill case not shown — show them."
    assert page.locator(".at-risk strong").inner_text().endswith(": 1 open")
    page.get_by_label("Show drill data").check()
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"drill="))
    page.wait_for_function("document.querySelectorAll('td.case-id').length === 2")
    shown = sorted(page.locator("td.case-id").all_inner_texts())
    assert shown == sorted([real.case_id, drill.case_id])
    assert page.locator(".at-risk strong").inner_text().endswith(": 2 open")
    assert notice.count() == 0
    assert page.get_by_label("Show drill data").is_checked()
