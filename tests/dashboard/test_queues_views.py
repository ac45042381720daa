"""Queue pages: tabs, filters and intent-id search (full page and htmx fragment),
"Load more" with the opaque cursor, "Assigned to me", and bulk dispositions with a
dry-run preview and a per-case result."""

from __future__ import annotations

import re
import uuid

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_assign
from tests.helpers import acting, audit_events, repositories, shown_intents, sign_in
from tests.reconciliation.factories import key_reuse_case, stuck_case

# Views only: the services' engine semantics are tested on both engines in tests/reconciliation.
pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}
WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "These need a closer look."}


def shown(html: str) -> list[str]:
    """Intent ids of the table rows, in order."""
    return shown_intents(html)


def test_queue_page_full_and_fragment(ddb, staff_client):
    """The full page has tabs with counts, filters and the table; htmx gets the
    #results fragment only; the answer varies on HX-Request."""
    stuck_case("q-1", fund="BUILDING")
    stuck_case("q-2")
    page = staff_client.get("/queues/stuck/")
    html = page.content.decode()
    assert page.status_code == 200 and "<!doctype html>" in html
    assert 'aria-current="page">Stuck claims <span class="badge">2</span>' in html
    assert 'action="/queues/stuck/"' in html and 'hx-push-url="true"' in html
    assert shown(html) == ["acme#q-1", "acme#q-2"]
    assert "HX-Request" in page["Vary"]
    fragment = staff_client.get("/queues/stuck/", **HX).content.decode()
    assert fragment.lstrip().startswith('<section id="results"')
    assert "<html" not in fragment and 'class="tabs"' not in fragment
    assert shown(fragment) == ["acme#q-1", "acme#q-2"]


def test_every_tab_renders(ddb, auditor_client):
    """Each of the six queue slugs has a page; an unknown slug is 404."""
    for slug in ("stuck", "ambiguous", "cancelled", "mismatch", "escalated", "approval"):
        response = auditor_client.get(f"/queues/{slug}/")
        assert response.status_code == 200, slug
        assert "No open cases match" in response.content.decode()
    assert auditor_client.get("/queues/nope/").status_code == 404


def test_filters_fund_amount_age_narrow_the_table(ddb, staff_client):
    """Fund, minimum amount and minimum age filter the table; the filter values stay in
    the form and in the tab links so the page can be shared."""
    with clock.travel(-5 * 3600):
        stuck_case("q-old", amount="500.00")
    stuck_case("q-new", fund="BUILDING", amount="10.00")
    stuck_case("q-mid", amount="75.00")
    assert shown(staff_client.get("/queues/stuck/?fund=building", **HX).content.decode()) == [
        "acme#q-new"
    ]
    big = staff_client.get("/queues/stuck/?min_amount=50").content.decode()
    assert shown(big) == ["acme#q-old", "acme#q-mid"]
    assert 'value="50"' in big and 'href="/queues/ambiguous/?min_amount=50"' in big
    old = staff_client.get("/queues/stuck/?min_age_h=4", **HX).content.decode()
    assert shown(old) == ["acme#q-old"]


def test_invalid_filters_are_400_with_field_errors(ddb, staff_client):
    """A malformed filter answers 400 and names the field, as a page and a fragment."""
    page = staff_client.get("/queues/stuck/?min_amount=lots")
    assert page.status_code == 400
    assert "a non-negative number" in page.content.decode()
    fragment = staff_client.get("/queues/stuck/?min_age_h=-3", **HX)
    assert fragment.status_code == 400
    assert "Check the highlighted filters" in fragment.content.decode()


def test_search_by_intent_id_finds_cases_in_any_queue(ddb, staff_client):
    """Searching tenant#key lists every case of that intent, whatever queue it is in;
    a bare key without the tenant is refused with a hint."""
    case = key_reuse_case(ddb, "q-search")
    stuck_case("q-other")
    html = staff_client.get("/queues/stuck/?q=acme%23q-search", **HX).content.decode()
    assert shown(html) == ["acme#q-search"]
    assert f"/cases/{case.case_id}/" in html and "in any queue or state: 1 found" in html
    bare = staff_client.get("/queues/stuck/?q=q-search")
    assert bare.status_code == 400
    assert "tenant#key" in bare.content.decode()


def test_assigned_to_me(ddb, client):
    """ "Assigned to me" keeps only the signed-in user's cases."""
    mine = stuck_case("q-mine")
    stuck_case("q-theirs")
    case_assign(**acting("ada").on(mine, seen_version=1, action_id="a"))
    sign_in(client, username="ada")
    html = client.get("/queues/stuck/?mine=on", **HX).content.decode()
    assert shown(html) == ["acme#q-mine"]
    assert client.get("/queues/stuck/?mine=on").content.decode().count("checked") >= 1


def test_load_more_follows_the_opaque_cursor(ddb, staff_client, monkeypatch):
    """With more cases than a page, "Load more" carries the cursor: htmx gets the next
    rows and the next button only; without htmx the link is a full page of the next
    rows. A tampered cursor is refused."""
    from dashboard.staff.views import queues

    monkeypatch.setattr(queues, "PAGE_SIZE", 2)
    for n in range(5):
        stuck_case(f"q-page-{n}")
    first = staff_client.get("/queues/stuck/").content.decode()
    assert shown(first) == ["acme#q-page-0", "acme#q-page-1"]
    href = re.search(r'<a class="button" href="([^"]+)" hx-get="\1"', first).group(1)
    href = href.replace("&amp;", "&")
    assert "cursor=" in href
    more = staff_client.get(href, **HX).content.decode()
    assert more.lstrip().startswith("<tr>") and 'id="results"' not in more
    assert shown(more) == ["acme#q-page-2", "acme#q-page-3"]
    assert 'id="load-more"' in more
    plain = staff_client.get(href).content.decode()
    assert "<!doctype html>" in plain and "back to the first" in plain
    assert 'aria-current="page">Stuck claims <span class="badge">5</span>' in plain
    assert shown(plain) == ["acme#q-page-2", "acme#q-page-3"]
    last = re.search(r'hx-get="([^"]+)"\s+hx-target="#load-more"', more).group(1)
    tail = staff_client.get(last.replace("&amp;", "&"), **HX).content.decode()
    assert shown(tail) == ["acme#q-page-4"] and 'id="load-more"' not in tail
    forged = staff_client.get(href[:-4] + "abcd", **HX)
    assert forged.status_code == 400
    assert "not a cursor this server issued" in forged.content.decode()


def test_auditors_get_no_bulk_controls(ddb, auditor_client):
    """Auditors see the table without selection boxes or the bulk form."""
    stuck_case("q-aud")
    html = auditor_client.get("/queues/stuck/").content.decode()
    assert shown(html) == ["acme#q-aud"]
    assert 'name="case_ids"' not in html and "bulk-form" not in html


def _bulk(ids: list[str], **extra) -> dict:
    return {
        "case_ids": ids,
        "disposition": "ESCALATE",
        "queue": "stuck",
        "action_id": str(uuid.uuid4()),
        "step": "preview",
        **WHY,
        **extra,
    }


def test_bulk_preview_then_apply(ddb, staff_client):
    """Preview says what each selected case would become and writes nothing; applying
    changes each case in its own audited event and reports per case; the queue table is
    told to reload."""
    one, two = stuck_case("q-b1"), stuck_case("q-b2")
    cancelled = key_reuse_case(ddb, "q-b3")
    html = staff_client.get("/queues/stuck/").content.decode()
    assert f'name="case_ids" value="{one.case_id}" form="bulk-form"' in html
    ids = [one.case_id, two.case_id, "C-NOPE"]
    preview = staff_client.post("/cases/bulk/", _bulk(ids), **HX)
    body = preview.content.decode()
    assert preview.status_code == 200
    assert body.lstrip().startswith('<div id="bulk-panel"')
    assert "Preview: nothing has changed yet" in body and body.count("Open → Escalated") == 2
    assert "No such case." in body
    assert "Apply to 2 cases" in body and 'name="step" value="apply"' in body
    assert repositories().cases.get(one.case_id).state == "OPEN"
    assert "HX-Trigger" not in preview

    confirm = re.search(
        r'<form method="post" action="/cases/bulk/" class="bulk-confirm".*?</form>', body, re.S
    )
    fields = re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', confirm.group(0))
    data: dict = {}
    for name, value in fields:
        data.setdefault(name, []).append(value)
    data = {k: v if k == "case_ids" else v[0] for k, v in data.items()}
    data["reason_text"] = WHY["reason_text"]  # HTML-escaped in the page
    applied = staff_client.post("/cases/bulk/", data, **HX)
    body = applied.content.decode()
    assert applied.status_code == 200 and applied["HX-Trigger"] == "queue-changed"
    assert "Result per case" in body and body.count(">done</span>") == 2
    assert "Escalate: 2 of 2 cases done" in body  # the disposition's label, not its code
    for case in (one, two):
        assert repositories().cases.get(case.case_id).state == "ESCALATED"
        assert [e["action"] for e in audit_events(ddb, f"CASE#{case.case_id}")] == [
            "case_opened",
            "case_escalated",
        ]
    again = staff_client.post("/cases/bulk/", data, **HX).content.decode()  # a double submit
    assert again.count("Not available for a stuck claim case, escalated") == 2
    assert len(audit_events(ddb, f"CASE#{one.case_id}")) == 2
    assert repositories().cases.get(cancelled.case_id).state == "OPEN"


def test_bulk_without_htmx_is_a_page(ddb, staff_client):
    """The bulk form also works without JavaScript: preview and result are full pages
    with a way back to the queue."""
    case = stuck_case("q-b4")
    page = staff_client.post("/cases/bulk/", _bulk([case.case_id]))
    html = page.content.decode()
    assert page.status_code == 200 and "<!doctype html>" in html
    assert "Preview: nothing has changed yet" in html and 'href="/queues/stuck/"' in html
    done = staff_client.post("/cases/bulk/", _bulk([case.case_id], step="apply")).content.decode()
    assert "Result per case" in done and "HX-Trigger" not in done
    assert repositories().cases.get(case.case_id).state == "ESCALATED"


def test_bulk_needs_a_selection_and_a_reason(ddb, staff_client):
    """No case selected, or no reason: 400, nothing changed, the reasons listed."""
    case = stuck_case("q-b5")
    empty = staff_client.post("/cases/bulk/", _bulk([]), **HX)
    assert empty.status_code == 400
    assert "Select at least one case" in empty.content.decode()
    unexplained = staff_client.post(
        "/cases/bulk/", _bulk([case.case_id], reason_code="", step="apply"), **HX
    )
    assert unexplained.status_code == 400
    assert "Nothing was changed" in unexplained.content.decode()
    not_bulk = staff_client.post("/cases/bulk/", _bulk([case.case_id], disposition="VOID_PLEDGE"))
    assert not_bulk.status_code == 400
    assert repositories().cases.get(case.case_id).state == "OPEN"


def test_my_cases_alone_is_marked_current_on_my_cases(ddb, staff_client):
    """On /queues/mine/ the navigation marks "My cases", not "Queues" as well."""
    html = staff_client.get("/queues/mine/").content.decode()
    current = re.findall(r'<a href="[^"]+" aria-current="page">([^<]+)</a>', html)
    assert current == ["My cases"]
    html = staff_client.get("/queues/stuck/").content.decode()
    assert re.findall(r'<a href="[^"]+" aria-current="page">(Queues|My cases)</a>', html) == [
        "Queues"
    ]


def _menu(html: str) -> list[str]:
    """The values the bulk form's disposition menu offers."""
    menu = re.search(r'<select name="disposition"[^>]*>(.*?)</select>', html, re.S)
    return re.findall(r'<option value="([^"]+)"', menu[1]) if menu else []


def test_bulk_menu_offers_only_what_a_listed_case_allows(ddb, staff_client):
    """The stuck queue's bulk menu leaves out "duplicate rejected" (no stuck case allows
    it); the cancelled queue's offers it; the escalated queue never offers "escalate";
    a queue listing no case has no bulk form at all."""
    case = stuck_case("bm-1")
    key_reuse_case(ddb, "bm-2")
    assert _menu(staff_client.get("/queues/stuck/").content.decode()) == [
        "RETRY_COMMIT",
        "ESCALATE",
    ]
    cancelled = _menu(staff_client.get("/queues/cancelled/").content.decode())
    assert "DUPLICATE_REJECTED_OK" in cancelled
    escalate = {
        "disposition": "ESCALATE",
        "seen_version": case.version,
        "action_id": "bm-esc",
        "reason_code": "NEEDS_REVIEW",
        "reason_text": "Needs a second look by the team.",
    }
    assert staff_client.post(f"/cases/{case.case_id}/dispose/", escalate).status_code == 302
    assert _menu(staff_client.get("/queues/escalated/").content.decode()) == ["RETRY_COMMIT"]
    assert "bulk-form" not in staff_client.get("/queues/mismatch/").content.decode()


def test_every_page_with_queue_tabs_counts_them(ddb, staff_client):
    """The resolved list and "My cases" show each queue tab's open count, as the queue
    pages do (the drill's cases left out)."""
    stuck_case("tabs-1")
    stuck_case("tabs-2")
    for path in ("/queues/stuck/", "/queues/resolved/", "/queues/mine/"):
        html = staff_client.get(path).content.decode()
        tabs = html.split('<nav class="tabs"')[1].split("</nav>")[0]
        assert re.search(
            r'href="/queues/stuck/[^"]*"[^>]*>Stuck claims <span class="badge">2</span>', tabs
        ), path
        assert 'Ambiguous timeouts <span class="badge">0</span>' in tabs, path
