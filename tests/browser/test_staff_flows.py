"""The staff dashboard in a real browser: queues and filters, a cancelled-transaction case
with its decoded reasons, a disposition, a four-eyes override, and a stale form."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from reconciliation import clock
from reconciliation.claims.outcomes import OutcomeKind
from tests.reconciliation.factories import ambiguous_case, stuck_case, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def cancelled_case(ddb, key: str, fund: str):
    """A CANCELLED_TRANSACTION case in ``fund``: the claim was TTL-deleted and the key came
    back with a different amount, so the durable pledge key refused the write."""
    from tests.helpers import repositories

    assert submit(key, fund=fund).kind == OutcomeKind.CREATED
    ddb.client.delete_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": f"acme#create_pledge#{key}"}},
    )
    outcome = submit(key, fund=fund, amount="99.00")
    assert outcome.kind == OutcomeKind.KEY_REUSED
    return repositories().cases.get(outcome.case_id)


def test_staff_filters_opens_cancelled_case_and_closes_it_as_a_duplicate(
    ddb, open_browser, live_server, screenshots, settings
):
    """Staff filter the cancelled queue by fund, open the case, read the decoded reason,
    find retry withheld (the pledge under the key is another request's) and record
    DUPLICATE_REJECTED_OK; the message and the new state appear without a reload."""
    settings.AUTO_RESOLVE_COMMITTED = False
    wanted = cancelled_case(ddb, "order-1001", "BUILDING")
    cancelled_case(ddb, "order-1002", "GENERAL")
    stuck_case("order-1003")
    for hours in (2, 6, 30):
        with clock.travel(-hours * 3600):
            stuck_case(f"order-aged-{hours}")
    ambiguous = ambiguous_case("order-1004")
    page = open_browser("staff")
    page.get_by_role("link", name="Overview").click()
    page.wait_for_url(f"{live_server.url}/")
    screenshots.shoot(page, "overview")

    page.goto(f"{live_server.url}/cases/{ambiguous.case_id}/")
    assert page.get_by_text("Answer lost", exact=True).is_visible()
    assert page.get_by_text("Transaction failed").count() == 0
    screenshots.shoot(page, "case-ambiguous")
    page.get_by_role("link", name="Overview").click()

    page.get_by_role("link", name="Queues", exact=True).click()
    page.get_by_role("link", name=re.compile("^Cancelled transactions")).click()
    # A click starts the navigation without waiting for the new page: wait for the rows
    # (a bare count() could read the old page and see none).
    page.wait_for_url(re.compile(r"/queues/cancelled/"))
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(2)
    page.get_by_label("Fund").fill("building")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"fund=building"))
    expect(rows).to_have_count(1)
    screenshots.shoot(page, "queue")

    page.get_by_role("link", name="acme order-1001").click()
    page.wait_for_url(f"{live_server.url}/cases/{wanted.case_id}/")
    assert page.get_by_text("Transaction failed").is_visible()
    # The first request's pledge is recorded: the banner says so (test_case_page_truth.py).
    assert page.get_by_text("A pledge is recorded, but this transaction wrote nothing").is_visible()
    decoded = page.locator("table.decoded")
    assert decoded.get_by_text("Condition failed").first.is_visible()
    assert decoded.get_by_text("The pledge for this intent already exists").is_visible()
    screenshots.shoot(page, "case-cancelled")

    # A key-reuse case offers neither confirm nor retry (test_cases_views.py), and shows
    # them disabled with the reason.
    assert page.get_by_role("radio", name=re.compile("^Retry the commit")).is_disabled()
    page.get_by_role("radio", name=re.compile("^Duplicate correctly rejected")).check()
    form = page.locator("form.action-form").first
    form.get_by_label("Reason code").select_option("DUPLICATE_VERIFIED")
    form.get_by_label("Reason", exact=True).fill("The client reused the key for a new pledge.")
    form.get_by_role("button", name="Record disposition").click()
    page.locator("#messages").get_by_text("the duplicate was correctly rejected").wait_for()
    assert page.locator("#case .badge.big").inner_text() == "Resolved"
    assert page.locator(".timeline").get_by_text("Disposition recorded").is_visible()
    screenshots.shoot(page, "case-after-disposition")


def test_staff_requests_release_and_another_supervisor_approves(
    ddb, open_browser, live_server, screenshots
):
    """Staff request RELEASE_CLAIM on a stuck case; a supervisor approves it on the
    Approvals page; the case is resolved and the claim FAILED."""
    from tests.helpers import repositories

    case = stuck_case("order-2001")
    staff = open_browser("staff")
    staff.goto(f"{live_server.url}/cases/{case.case_id}/")
    assert staff.get_by_text("No outcome recorded").is_visible()
    screenshots.shoot(staff, "case-stuck")
    form = staff.locator("form.action-form.override")
    form.get_by_role("radio", name=re.compile("Release the claim")).check()
    form.get_by_label("Reason code").select_option("CLIENT_CONFIRMED")
    form.get_by_label("Reason", exact=True).fill("The client wants to send the pledge again.")
    form.get_by_role("button", name="Request override").click()
    staff.locator("#messages").get_by_text("a supervisor must approve").wait_for()
    assert staff.locator("#case .badge.big").inner_text() == "Override requested"

    supervisor = open_browser("supervisor")
    supervisor.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
    request = supervisor.locator(f"#req-{case.case_id}")
    assert request.locator("dd", has_text="staff@example.org").inner_text().startswith("staff ")
    screenshots.shoot(supervisor, "approvals")
    request.get_by_label("Reason code").select_option("CLIENT_CONFIRMED")
    request.get_by_label("Note").fill("Checked with the client; release it.")
    request.get_by_role("button", name="Approve").click()
    supervisor.locator(f"#req-{case.case_id}").get_by_text(
        "Approved: the claim is released"
    ).wait_for()
    supervisor.locator("#messages").get_by_text("Approved").wait_for()

    stored = repositories().cases.get(case.case_id)
    assert stored.state == "RESOLVED"
    assert repositories().claims.get(case.claim_pk).status == "FAILED"


def test_stale_form_shows_who_changed_the_case(ddb, open_browser, live_server, screenshots):
    """Two staff have the same case open; the second acts after the first assigned it:
    the page shows who changed it and when, with the fresh state, and applies nothing."""
    case = stuck_case("order-3001")
    first = open_browser("staff")
    second = open_browser("staff2")
    for page in (first, second):
        page.goto(f"{live_server.url}/cases/{case.case_id}/")
    first.get_by_role("button", name="Assign to me").click()
    first.locator("#messages").get_by_text("Assigned to you").wait_for()

    second.get_by_role("radio", name=re.compile("^Escalate")).check()
    form = second.locator("form.action-form").first
    form.get_by_label("Reason code").select_option("NEEDS_REVIEW")
    form.get_by_label("Reason", exact=True).fill("Needs a second pair of eyes.")
    form.get_by_role("button", name="Record disposition").click()
    banner = second.locator(".banner.conflict")
    banner.wait_for()
    assert "changed by staff" in banner.inner_text()
    assert second.locator("dd.assignee").get_by_text("staff").first.is_visible()
    assert second.locator("#case .badge.big").inner_text() == "Open"
    screenshots.shoot(second, "case-conflict")


def test_running_the_drill_keeps_the_page_whole(
    ddb, open_browser, live_server, screenshots, celery_results_kept
):
    """After "Run the drill now" (1) the page keeps its title, navigation and button,
    and its report shows the run that just ended (tasks run inline in tests), and
    nothing says it is still running."""
    supervisor = open_browser("supervisor")
    supervisor.get_by_role("navigation", name="Main").get_by_role("link", name="Drill").click()
    supervisor.get_by_text("No drill has run yet").wait_for()
    supervisor.get_by_role("button", name="Run the drill now").click()
    supervisor.locator("#drill-report h2").get_by_text("Last run").wait_for(timeout=180_000)
    assert supervisor.title().startswith("Drill")
    assert supervisor.get_by_role("navigation", name="Main").is_visible()
    assert supervisor.get_by_role("button", name="Run the drill now").is_visible()
    assert supervisor.get_by_text("is running").count() == 0
    screenshots.shoot(supervisor, "drill")
