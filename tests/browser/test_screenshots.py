"""Every page each role can reach, at 1280 and 800 px wide over cases of every type and
state: at 800 px no page may scroll sideways. With ``TEST_SCREENSHOTS=1`` each is also
saved, full page, as test-results/screenshots/<role>/<page>-<width>.png for a person
to look at (tests/browser/conftest.py · Camera)."""

from __future__ import annotations

import pytest

from reconciliation.cases.actions import StaffAction
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.overrides import override_request
from tests.browser.conftest import NARROW
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM, token_spent_elsewhere
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROLES = {"finance_staff": "staff", "supervisor": "supervisor", "auditor": "auditor"}
WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "Screenshot tour reason text."}


def token_mismatch_case(ddb, key: str) -> str:
    """A TOKEN_MISMATCH case: the commit goes out under a token another transaction used."""
    with token_spent_elsewhere(ddb):
        return submit(key).case_id


def seed(ddb, settings) -> dict[str, str]:
    """A case of each type, one escalated, one awaiting approval and one resolved; the
    page names of the case pages, by case id."""
    settings.AUTO_RESOLVE_COMMITTED = False
    store, ada = AS_SYSTEM.store, staff_actor("ada")
    escalated = stuck_case("shot-escalated")
    case_dispose(
        case_id=escalated.case_id,
        disposition="ESCALATE",
        staff=StaffAction(actor=ada, seen_version=escalated.version, **WHY),
        store=store,
    )
    awaiting = stuck_case("shot-awaiting")
    override_request(
        case_id=awaiting.case_id,
        override="RELEASE_CLAIM",
        staff=StaffAction(actor=ada, seen_version=awaiting.version, action_id="shot", **WHY),
        store=store,
    )
    resolved = ambiguous_case("shot-resolved")
    case_dispose(
        case_id=resolved.case_id,
        disposition="CONFIRMED_COMMITTED",
        staff=StaffAction(actor=ada, seen_version=resolved.version, **WHY),
        store=store,
    )
    return {
        "case-stuck": stuck_case("shot-stuck").case_id,
        "case-ambiguous": ambiguous_case("shot-ambiguous").case_id,
        "case-cancelled": key_reuse_case(ddb, "shot-cancelled").case_id,
        "case-token-mismatch": token_mismatch_case(ddb, "shot-token"),
        "case-escalated": escalated.case_id,
        "case-awaiting-approval": awaiting.case_id,
        "case-resolved": resolved.case_id,
    }


def tour(cases: dict[str, str]) -> dict[str, str]:
    """Page name → path: every staff page (a role that may not open one gets its 403)."""
    pages = {
        "overview": "/",
        **{
            f"queue-{slug}": f"/queues/{slug}/"
            for slug in ("stuck", "ambiguous", "cancelled", "mismatch", "escalated", "approval")
        },
        "queue-resolved": "/queues/resolved/",
        "queue-mine": "/queues/mine/",
        "search": "/cases/?q=shot-stuck",
        "approvals": "/approvals/",
        "acks": "/acks/",
        "audit": "/audit/",
        "audit-exports": "/audit/exports/",
        "drill": "/drill/",
        "profile": "/accounts/profile/",
        "worklist": "/worklist/?sort=amount",
        "staff": "/accounts/staff/",
    }
    pages.update({name: f"/cases/{case_id}/" for name, case_id in cases.items()})
    return pages


@pytest.mark.long
def test_every_page_for_every_role_at_two_widths(
    ddb, settings, open_browser, live_server, screenshots
):
    """Each role visits every page it can reach; each is saved at 1280 and 800 px, and at
    800 px none is wider than the window."""
    cases = seed(ddb, settings)
    pages = tour(cases)
    too_wide, reached = [], {}
    for role, username in ROLES.items():
        page = open_browser(username)
        reached[role] = []
        for name, path in pages.items():
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None and response.status in (200, 403, 404), (role, path)
            if response.status != 200:
                continue
            # goto waited for the load event: the pages render on the server and load
            # nothing after it (htmx only polls, every 2 s, while work runs), so waiting
            # for "networkidle" only added its 500 ms of quiet to each of ~60 visits.
            reached[role].append(name)
            scroll, client = screenshots.shoot(page, f"{role}/{name}")[NARROW]
            if scroll > client:
                too_wide.append(f"{role} {name} ({path}): {scroll} px in {client} px")
    for role in ROLES:
        assert {"overview", "queue-stuck", "profile", *cases} <= set(reached[role]), role
    assert {"approvals", "staff", "drill"} <= set(reached["supervisor"])
    assert "audit" in reached["auditor"]
    assert not too_wide, "pages scroll sideways at 800 px:\n" + "\n".join(too_wide)
