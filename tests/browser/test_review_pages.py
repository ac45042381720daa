"""The pages a new-user review changed, in a browser, for each role that sees them at
1280 px (saved with ``TEST_SCREENSHOTS=1`` under test-results/screenshots/review/):
approval cards with their evidence, a decided request's notification, the queue's bulk
menu, the next case saying which case was just decided, the staff page's resets, the
sign-out question, and the recovery codes first on the profile."""

from __future__ import annotations

import pytest

from reconciliation.casework.overrides import override_request
from tests.helpers import AS_SYSTEM, acting
from tests.reconciliation.factories import ambiguous_case, stuck_case, void_requested

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ACTING = ("staff", "supervisor")
WHY = {"reason_code": "CLIENT_CONFIRMED", "reason_text": "The client wants to retry."}


def _release_requested(key: str):
    """A stuck case with a RELEASE_CLAIM request by finance staff "staff"."""
    case = stuck_case(key)
    return override_request(
        override="RELEASE_CLAIM", **acting("staff").on(case, action_id=key, **WHY)
    ).case


def _notified(pending, decided) -> None:
    """Supervisors told of two requests; the second decided by supervisor2."""
    from dashboard.staff.notifications import notify_override_decided, notify_override_requested
    from reconciliation.audit.models import AuditAction

    for case in (pending, decided):
        notify_override_requested(
            case_id=case.case_id, request=case.override, override="RELEASE_CLAIM", actor="staff"
        )
    notify_override_decided(
        case_id=decided.case_id,
        request=decided.override,
        action=AuditAction.OVERRIDE_REJECTED,
        actor="supervisor2",
    )


def test_approvals_and_notifications_for_supervisors(ddb, open_browser, live_server, screenshots):
    """Each approval card shows the pledge and claim; the decided request's
    notification is not new and says who decided it."""
    pending = _release_requested("rv-release")
    void_requested(ambiguous_case("rv-void"))
    decided = _release_requested("rv-decided")
    _notified(pending, decided)
    page = open_browser("supervisor")
    page.goto(f"{live_server.url}/approvals/")
    cards = page.locator("article.request")
    assert cards.count() == 3
    assert page.get_by_text("No pledge is recorded for this intent.").count() == 2
    assert page.get_by_text("The pledge is recorded with this request's payload.").count() == 1
    screenshots.save(page, "review/supervisor-approvals-1280.png")
    page.goto(f"{live_server.url}/notifications/")
    assert page.locator("table.notifications .badge", has_text="New").count() == 1
    assert page.get_by_text("Decided since: override rejected by supervisor2.").is_visible()
    screenshots.save(page, "review/supervisor-notifications-1280.png")


@pytest.mark.parametrize("username", ACTING)
def test_bulk_menu_and_the_next_case(ddb, open_browser, live_server, screenshots, username):
    """The stuck queue's bulk menu offers retry and escalate only; recording a case with
    "Record and open the next case" opens the next one, which says what was decided."""
    first = stuck_case(f"rv-next-1-{username}")
    stuck_case(f"rv-next-2-{username}")
    page = open_browser(username)
    page.goto(f"{live_server.url}/queues/stuck/")
    page.locator("details.bulk summary").click()
    options = page.locator("#bulk-form select[name=disposition] option")
    assert options.all_inner_texts() == ["Retry the commit", "Escalate"], options.all_inner_texts()
    screenshots.save(page, f"review/{username}-queue-stuck-bulk-1280.png")

    page.goto(f"{live_server.url}/cases/{first.case_id}/")
    form = page.locator("form:has(button[name=then_next])")
    form.locator("input[name=disposition][value=ESCALATE]").check()
    form.locator("select[name=reason_code]").select_option("NEEDS_REVIEW")
    form.locator("textarea[name=reason_text]").fill("Needs a second look by the team.")
    form.get_by_role("button", name="Record and open the next case").click()
    page.wait_for_url(lambda url: first.case_id not in url and "/cases/" in url)
    message = page.locator(".message", has_text="Just decided:")
    assert message.is_visible()
    assert message.locator("a").get_attribute("href") == f"/cases/{first.case_id}/"
    screenshots.save(page, f"review/{username}-next-case-1280.png")


def test_staff_page_and_signing_a_colleague_out(ddb, open_browser, live_server, screenshots):
    """Resets are offered for accounts with an authenticator (the supervisors and the
    auditor), not for finance staff with none; "Sign out all…" asks on a page first."""
    open_browser("staff")  # a session to sign out
    page = open_browser("supervisor")
    page.goto(f"{live_server.url}/accounts/staff/")
    row = page.locator("tr", has_text="staff@example.org").first
    assert row.get_by_text("Nothing to reset: no authenticator or passkey").is_visible()
    auditor = page.locator("tr", has_text="auditor@example.org")
    assert auditor.get_by_role("button", name="Reset").is_visible()
    screenshots.save(page, "review/supervisor-staff-1280.png")
    row.get_by_role("button", name="Sign out all sessions of staff").click()
    page.wait_for_load_state()
    assert page.get_by_role("heading", name="Sign out every session of staff?").is_visible()
    screenshots.save(page, "review/supervisor-sign-out-confirm-1280.png")


@pytest.mark.parametrize("username", ["staff", "supervisor", "auditor"])
def test_recovery_codes_come_first(ddb, open_browser, live_server, screenshots, username):
    """Finance staff setting up an authenticator, and supervisors and auditors issuing
    new codes, see the ten codes first on the page, the rest of the profile below."""
    from django_otp.oath import totp
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from tests.browser.conftest import authenticator_code

    page = open_browser(username)
    page.goto(f"{live_server.url}/accounts/profile/")
    if username == "staff":
        pending = TOTPDevice.objects.get(user__username=username, confirmed=False)
        now = totp(pending.bin_key, pending.step, pending.t0, pending.digits, pending.drift)
        page.locator("#id_otp_token").fill(f"{now:0{pending.digits}d}")
        page.get_by_role("button", name="Confirm").click()
    else:
        page.locator("input[name=recovery-otp_token]").fill(authenticator_code(username))
        page.locator("form:has(input[name=recovery-otp_token]) button[type=submit]").click()
    page.wait_for_load_state()
    headings = page.locator("main h2").all_inner_texts()
    assert headings[0] == "Your recovery codes", headings
    assert page.locator("ol.recovery-codes li").count() == 10
    screenshots.save(page, f"review/{username}-recovery-codes-1280.png")


@pytest.mark.parametrize("username", ["staff", "supervisor", "auditor"])
def test_pledge_page_shows_what_a_reused_key_asked(
    ddb, open_browser, live_server, screenshots, username
):
    """The 422 row of the pledge page shows the refused request's fields beside what the
    key recorded, the differing amount marked, for every role that opens the page."""
    from decimal import Decimal

    from reconciliation.claims.outcomes import OutcomeKind
    from reconciliation.claims.request import PledgeRequest
    from reconciliation.claims.request_log import IntakeAnswer, intake_request_new
    from reconciliation.claims.request_log_buffer import intake_request_buffer, request_log_flush
    from tests.reconciliation.factories import submit

    assert submit("rv-ask").kind == OutcomeKind.CREATED
    asked = PledgeRequest(donor_ref="D-1001", fund="GENERAL", amount=Decimal("99"), currency="USD")
    entry = intake_request_new(
        tenant="acme",
        idempotency_key="rv-ask",
        answer=IntakeAnswer(status=422, outcome=OutcomeKind.KEY_REUSED, rejected=True),
        donor_ref="D-1001",
        asked=asked,
    )
    intake_request_buffer(entry, store=AS_SYSTEM.store)
    request_log_flush()
    page = open_browser(username)
    page.goto(f"{live_server.url}/pledges/acme/rv-ask/")
    table = page.locator("table.asked")
    assert table.locator("tr.differs").all_inner_texts() == ["Amount\t99.00 differs\t25.00"]
    table.scroll_into_view_if_needed()
    screenshots.save(page, f"review/{username}-pledge-422-1280.png")
