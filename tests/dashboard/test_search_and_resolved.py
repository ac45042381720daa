"""Case search at /cases/?q= (by case id, the client's own key under any tenant, or the
donor ref; nothing or nonsense answers a message, never a 500) and the resolved list at
/queues/resolved/ (newest first, who, how, when, filters, cursor)."""

from __future__ import annotations

import re

import pytest

from reconciliation import clock
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.models import OverrideRequest
from reconciliation.cases.vocabulary import Disposition
from reconciliation.casework.dispositions import case_dispose
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM, repositories
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}
WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "The pledge read back is there."}


def found_ids(html: str) -> list[str]:
    return re.findall(r'<td class="mono case-id"><a href="/cases/([^/]+)/">', html)


def test_search_by_case_id_client_key_and_donor_ref(ddb, staff_client):
    """One box finds a case by its id (any case), by the client's own key without the
    tenant, and by donor ref; each row says what matched."""
    from dashboard.tenancy.models import ApiToken

    ApiToken.objects.create(tenant="acme", token_hash="x" * 64, hint="xxxx")
    a = stuck_case("order-77", donor_ref="D-555")
    b = stuck_case("order-78", donor_ref="D-999")
    by_id = staff_client.get(f"/cases/?q={a.case_id.lower()}").content.decode()
    assert found_ids(by_id) == [a.case_id] and "case id" in by_id
    by_key = staff_client.get("/cases/?q=order-78").content.decode()
    assert found_ids(by_key) == [b.case_id]
    assert "client&#x27;s idempotency key" in by_key and "(acme)" in by_key
    by_donor = staff_client.get("/cases/?q=D-555", **HX).content.decode()
    assert by_donor.lstrip().startswith('<section id="results"')
    assert found_ids(by_donor) == [a.case_id] and "donor ref" in by_donor
    assert found_ids(staff_client.get("/cases/?q=acme%23order-77").content.decode()) == [a.case_id]


def test_donor_ref_search_ignores_case(ddb, staff_client):
    """A donor ref typed in another case finds the case stored with it as given
    (``syn-2653567`` finds the case of ``SYN-2653567``), and the page still shows the
    ref as the client sent it."""
    a = stuck_case("order-case", donor_ref="SYN-2653567")
    for typed in ("syn-2653567", "SYN-2653567", "Syn-2653567"):
        html = staff_client.get(f"/cases/?q={typed}").content.decode()
        assert found_ids(html) == [a.case_id], typed
        assert "donor ref" in html
    assert repositories().cases.get(a.case_id).donor_ref == "SYN-2653567"


def test_search_for_nothing_or_nonsense_answers_a_message(ddb, auditor_client):
    """No query shows the form; an empty one says what to type; an unknown one says
    nothing matched; an oversized or multi-line one is 400 with a message — never 500."""
    blank = auditor_client.get("/cases/")
    assert blank.status_code == 200 and 'name="q"' in blank.content.decode()
    empty = auditor_client.get("/cases/?q=+++")
    assert empty.status_code == 200 and "Type a case id" in empty.content.decode()
    none = auditor_client.get("/cases/?q=nobody-knows")
    assert none.status_code == 200 and "No case has that id" in none.content.decode()
    for bad in ("x" * 300, "a%0Ab", "C-" + "A" * 3000):
        response = auditor_client.get(f"/cases/?q={bad}")
        assert response.status_code == 400, bad
        assert 'role="alert"' in response.content.decode()


def test_nav_has_the_search_box(ddb, staff_client):
    """Every page's navigation carries the case search."""
    assert (
        'class="nav-search" method="get" action="/cases/"' in staff_client.get("/").content.decode()
    )


def test_the_nav_search_box_keeps_the_query_on_the_results_page(ddb, staff_client):
    """Searching from the navigation's box answers a results page whose navigation box
    still holds the query, as typed and escaped; other pages' boxes are empty."""
    html = staff_client.get("/cases/", {"q": 'D-10"01 <x>'}).content.decode()
    nav = html.split('class="nav-search"')[1].split("</form>")[0]
    assert 'value="D-10&quot;01 &lt;x&gt;"' in nav
    other = (
        staff_client.get("/").content.decode().split('class="nav-search"')[1].split("</form>")[0]
    )
    assert "value=" not in other


def _resolved_world():
    ada, bob = staff_actor("ada"), staff_actor("bob")
    with clock.travel(-40 * 86400):
        old = ambiguous_case("r-old", fund="BUILDING")
        case_dispose(
            case_id=old.case_id,
            disposition="CONFIRMED_COMMITTED",
            staff=StaffAction(actor=bob, seen_version=old.version, **WHY),
            store=_store(),
        )
    a = ambiguous_case("r-a")
    case_dispose(
        case_id=a.case_id,
        disposition="CONFIRMED_COMMITTED",
        staff=StaffAction(actor=ada, seen_version=a.version, **WHY),
        store=_store(),
    )
    with clock.travel(60):
        from tests.helpers import repositories

        b = key_reuse_case(repositories(), "r-b")
        case_dispose(
            case_id=b.case_id,
            disposition="DUPLICATE_REJECTED_OK",
            staff=StaffAction(
                actor=bob,
                reason_code="DUPLICATE_VERIFIED",
                reason_text="Same key came back with another body.",
                seen_version=b.version,
            ),
            store=_store(),
        )
    stuck_case("r-open")
    return old, a, b


def _store():

    return AS_SYSTEM.store


def test_resolved_list_newest_first_with_who_how_when(ddb, auditor_client):
    """Resolved cases are listed newest first across months, with who resolved them and
    how in words; open cases are not listed."""
    old, a, b = _resolved_world()
    page = auditor_client.get("/queues/resolved/")
    html = page.content.decode()
    assert page.status_code == 200
    assert found_ids(html) == [b.case_id, a.case_id, old.case_id]
    resolver = '<td class="resolver" data-label="By"><span class="name">'
    assert f"{resolver}bob" in html and f"{resolver}ada" in html
    assert "Duplicate correctly rejected" in html and "Confirmed committed" in html
    assert ">DUPLICATE_REJECTED_OK<" not in html  # the code only as a select value


def test_resolved_filters_by_resolver_disposition_fund_and_time(ddb, staff_client):
    """Each filter narrows the list; bad dates are 400 with the field named."""
    old, a, b = _resolved_world()
    get = lambda q: found_ids(staff_client.get(f"/queues/resolved/?{q}", **HX).content.decode())  # noqa: E731
    assert get("resolved_by=bob") == [b.case_id, old.case_id]
    assert get("how=DUPLICATE_REJECTED_OK") == [b.case_id]
    assert get("fund=building") == [old.case_id]
    today = clock.now().date().isoformat()
    assert get(f"since={today}") == [b.case_id, a.case_id]
    far = (clock.now().date().replace(day=1)).isoformat()
    assert old.case_id not in get(f"since={far}")
    assert get(
        f"until={(clock.now().date().fromordinal(clock.now().date().toordinal() - 20)).isoformat()}"
    ) == [old.case_id]
    bad = staff_client.get("/queues/resolved/?since=yesterday")
    assert bad.status_code == 400 and "a date" in bad.content.decode()
    assert staff_client.get("/queues/resolved/?how=REOPEN").status_code == 400


def test_resolved_list_pages_with_a_cursor(ddb, staff_client):
    """Load more continues where the page ended, across months; a forged cursor is 400."""
    from dashboard.staff.views import queues

    old, a, b = _resolved_world()
    original = queues.PAGE_SIZE
    queues.PAGE_SIZE = 2
    try:
        first = staff_client.get("/queues/resolved/").content.decode()
        assert found_ids(first) == [b.case_id, a.case_id]
        more = re.search(r'href="(/queues/resolved/\?cursor=[^"]+)"', first).group(1)
        assert found_ids(staff_client.get(more, **HX).content.decode()) == [old.case_id]
    finally:
        queues.PAGE_SIZE = original
    assert staff_client.get("/queues/resolved/?cursor=forged").status_code == 400


def test_reopen_takes_a_case_out_of_the_resolved_list(ddb):
    """The resolved index keys exist only while the case is resolved."""
    from reconciliation.cases.repository import case_indexed
    from reconciliation.cases.transitions import Grounds, case_disposed, case_override_approved

    case = stuck_case("r-x")
    ada = staff_actor("ada")
    at = clock.parse_iso("2026-12-01T10:00:00.000000Z")
    resolved = case_indexed(case_disposed(case, Grounds(ada, at), Disposition.RETRY_COMMIT).case)
    assert (resolved.resolved_month, resolved.resolved_by, resolved.resolved_how) == (
        "R#2026-12",
        "ada",
        "RETRY_COMMIT",
    )
    assert resolved.queue is None
    reopen = OverrideRequest.from_json({"action": "REOPEN"})
    later = clock.parse_iso("2026-12-01T11:00:00.000000Z")
    reopened = case_indexed(case_override_approved(resolved, Grounds(ada, later), reopen).case)
    assert reopened.resolved_month is None and reopened.resolved_sort is None and reopened.queue


def test_a_declined_reopen_keeps_the_resolution_it_had(ddb):
    """A request to reopen a resolved case, declined (or expired), returns it to RESOLVED
    with no new resolution: the resolved list keeps who resolved it, how and when, not
    the supervisor who declined, the time of the decline and an empty 'how'."""
    from reconciliation.cases.repository import case_indexed
    from reconciliation.cases.transitions import (
        Grounds,
        case_disposed,
        case_override_rejected,
        case_override_requested,
    )

    case = stuck_case("r-declined")
    ada, sam = staff_actor("ada"), staff_actor("sam")
    at = clock.parse_iso("2026-11-30T09:00:00.000000Z")
    resolved = case_indexed(
        case_disposed(case, Grounds(ada, at), Disposition.CONFIRMED_COMMITTED).case
    )
    reopen = OverrideRequest.from_json({"action": "REOPEN", "prior_state": "RESOLVED"})
    asked = case_indexed(
        case_override_requested(
            resolved, Grounds(ada, clock.parse_iso("2026-12-01T10:00:00.000000Z")), reopen
        ).case
    )
    assert asked.resolved_month is None
    declined = case_indexed(
        case_override_rejected(
            asked, Grounds(sam, clock.parse_iso("2026-12-01T11:00:00.000000Z")), reopen
        ).case
    )
    assert (
        declined.resolved_month,
        declined.resolved_sort,
        declined.resolved_by,
        declined.resolved_how,
    ) == (
        "R#2026-11",
        f"2026-11-30T09:00:00.000000Z#{case.case_id}",
        "ada",
        "CONFIRMED_COMMITTED",
    )


@pytest.mark.parametrize("query", ["until=9999-12-31", "since=0001-01-01", "until=1999-01-01"])
def test_a_day_out_of_range_is_a_clear_400(ddb, staff_client, query):
    """The last day of year 9999 has no next day: an HTML 500 before."""
    response = staff_client.get(f"/queues/resolved/?{query}")
    assert response.status_code == 400
    assert "between the years 2000 and 9998" in response.content.decode()
