"""The pledge page at /pledges/<tenant>/<key>/: every stored key has a page
(its claim, pledge, ledger shard, cases and audit events), found from the search by key,
``tenant#key`` or donor ref in any letter case, and linked from the case page; a key with
nothing stored answers a friendly 404; every staff role sees it; no read Scans."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from reconciliation.claims.outcomes import OutcomeKind
from tests.helpers import sign_in
from tests.reconciliation.factories import ambiguous_case, stuck_case, submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

ROLES = ["finance_staff", "supervisor", "auditor"]


@pytest.fixture
def tenant_known(db):
    from dashboard.tenancy.models import ApiToken

    ApiToken.objects.create(tenant="acme", token_hash="x" * 64, hint="xxxx")


def pledge_url(key: str, tenant: str = "acme") -> str:
    return f"/pledges/{tenant}/{quote(key, safe='')}/"


def test_a_clean_pledge_is_found_by_its_key_and_donor_ref(ddb, staff_client, tenant_known):
    """A pledge answered 201, with no case, is found by its key, by ``tenant#key`` and by
    its donor ref in another letter case, each row linking to its page (before: "No case
    has that id…")."""
    assert submit("clean-201", donor_ref="SYN-2653567").kind == OutcomeKind.CREATED
    for typed in ("clean-201", "acme%23clean-201", "syn-2653567", "SYN-2653567"):
        html = staff_client.get(f"/cases/?q={typed}").content.decode()
        assert html.count('href="/pledges/acme/clean-201/"') == 1, typed
    by_key = staff_client.get("/cases/?q=clean-201").content.decode()
    assert "matched by client&#x27;s idempotency key" in by_key
    assert "matched by donor ref" in staff_client.get("/cases/?q=syn-2653567").content.decode()


def test_a_recorded_pledge_page_shows_claim_pledge_ledger_cases_and_events(ddb, auditor_client):
    """An ambiguous write that did commit: the page shows the pledge (amount with
    currency, fund, donor ref, status, time), the completed claim with its labels, the
    ledger shard's totals, the case (linked) and the pledge's audit receipt."""
    case = ambiguous_case("page-amb", donor_ref="D-PAGE", amount="42.50", fund="GENERAL")
    page = auditor_client.get(pledge_url("page-amb"))
    html = page.content.decode()
    assert page.status_code == 200
    for shown in (
        "42.50 USD",
        "GENERAL",
        "<code>D-PAGE</code>",
        "Recorded",
        "Completed",
        "Replay window ends",  # a completed claim's expiry: never "Lease ends"
        "Shard total",
        "Pledges in it",
        "Deliveries",
    ):
        assert shown in html, shown
    assert f'href="/cases/{case.case_id}/"' in html
    assert "No events in the pledge" not in html  # its receipt is listed


def test_a_stuck_key_has_a_page_without_a_pledge(ddb, staff_client):
    """A crashed write: a pending claim, no pledge, nothing on the ledger, its stuck
    case linked."""
    case = stuck_case("page-stuck")
    html = staff_client.get(pledge_url("page-stuck")).content.decode()
    assert "No pledge is recorded for this key" in html
    assert "Pending" in html and "Nothing was added to the ledger" in html
    assert "Lease ends" in html  # a pending claim's expiry is its lease
    assert f'href="/cases/{case.case_id}/"' in html


@pytest.mark.parametrize("role", ROLES)
def test_every_staff_role_sees_the_page_and_an_unknown_key_is_a_friendly_404(ddb, client, role):
    """Each role that sees cases sees the page; a key with neither claim nor pledge is a
    404 page naming the key and offering the search, never a 500."""
    submit("page-role")
    sign_in(client, role)
    assert client.get(pledge_url("page-role")).status_code == 200
    for missing in (
        pledge_url("nobody-sent-this"),
        pledge_url("page-role", "other"),
        pledge_url("x" * 300),
    ):
        answer = client.get(missing)
        assert answer.status_code == 404, missing
        assert "No pledge under this key" in answer.content.decode()


def test_no_role_no_page(ddb, client):
    """Someone in no staff group is refused."""
    submit("page-norole")
    sign_in(client, None, username="outsider")
    assert client.get(pledge_url("page-norole")).status_code == 403


def test_a_key_with_slashes_and_marks_round_trips_percent_encoded(ddb, staff_client, tenant_known):
    """A key holding ``/``, ``#``, ``?``, ``%`` and a space reaches its own page from the
    search's link, and the key is shown in ``<code>``."""
    key = "order/7 #?%x"
    assert submit(key).kind == OutcomeKind.CREATED
    html = staff_client.get("/cases/?" + f"q={quote(key, safe='')}").content.decode()
    import re

    [href] = re.findall(r'href="(/pledges/acme/[^"]+)"', html)
    page = staff_client.get(href)
    assert page.status_code == 200
    assert "<code>order/7 #?%x</code>" in page.content.decode()


def test_the_case_page_links_to_the_pledge_page(ddb, staff_client):
    """The case page's summary links its key's pledge page."""
    case = stuck_case("page-link")
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    assert 'href="/pledges/acme/page-link/"' in html


def test_the_page_and_the_search_never_scan(ddb, staff_client, tenant_known, monkeypatch):
    """Every read of the page and of the search is a GetItem, BatchGetItem or Query."""
    import botocore.client

    ambiguous_case("page-noscan", donor_ref="D-NOSCAN")
    calls: list[str] = []
    real = botocore.client.BaseClient._make_api_call

    def spy(self, operation, params):
        calls.append(operation)
        return real(self, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", spy)
    assert staff_client.get(pledge_url("page-noscan")).status_code == 200
    assert staff_client.get("/cases/?q=d-noscan").status_code == 200
    assert staff_client.get("/cases/?q=page-noscan").status_code == 200
    assert calls and "Scan" not in calls
    assert set(calls) <= {"GetItem", "Query", "BatchGetItem"}, set(calls)


def test_backfill_gives_older_pledges_their_donor_key(ddb, staff_client, tenant_known):
    """A pledge written before ``donor_key`` is not found by its donor ref; after
    ``backfill_cases`` it is, in any letter case, and a second run changes nothing."""
    from io import StringIO

    from django.core.management import call_command

    assert submit("old-pledge", donor_ref="OLD-DONOR-7").kind == OutcomeKind.CREATED
    ddb.client.update_item(
        TableName=ddb.tables.pledges,
        Key={"intent_id": {"S": "acme#old-pledge"}},
        UpdateExpression="REMOVE donor_key",
    )
    link = 'href="/pledges/acme/old-pledge/"'
    assert link not in staff_client.get("/cases/?q=old-donor-7").content.decode()
    out = StringIO()
    call_command("backfill_cases", stdout=out)
    assert "1 given a donor key" in out.getvalue()
    assert link in staff_client.get("/cases/?q=old-donor-7").content.decode()
    again = StringIO()
    call_command("backfill_cases", stdout=again)
    assert "0 given a donor key" in again.getvalue()


def as_a_browser_resolves(base: str, href: str) -> str:
    """``href`` resolved against ``base`` as urljoin does, then its dot segments removed
    as the URL Standard says a browser does: ``%2e`` counts as ``.`` there."""
    from urllib.parse import urljoin, urlsplit, urlunsplit

    parts = urlsplit(urljoin(base, href))
    kept: list[str] = []
    segments = parts.path.split("/")[1:]
    for n, segment in enumerate(segments):
        last = n == len(segments) - 1
        if segment.lower() in ("..", ".%2e", "%2e.", "%2e%2e"):
            kept = kept[:-1]
            if last:
                kept.append("")
        elif segment.lower() in (".", "%2e"):
            if last:
                kept.append("")
        else:
            kept.append(segment)
    return urlunsplit(parts._replace(path="/" + "/".join(kept)))


@pytest.mark.parametrize("key", ["../k", ".", "..", "a/../b", "./x", "%2e%2e"])
def test_a_key_of_dot_segments_links_to_its_own_page(ddb, staff_client, tenant_known, key):
    """The search's link for a key made of ``.``, ``..`` and ``/`` lands, once a browser
    has resolved it, on the page of that very key (before: ``/pledges/acme/../k/`` went to
    ``/pledges/k/``), and that page answers 200 showing the key."""
    from urllib.parse import urlsplit

    assert submit(key).kind == OutcomeKind.CREATED
    search = f"http://testserver/cases/?q={quote(key, safe='')}"
    html = staff_client.get(search).content.decode()
    import html as html_lib
    import re

    [href] = re.findall(r'href="(/pledges/[^"]+)"', html)
    landed = as_a_browser_resolves(search, html_lib.unescape(href))
    parts = urlsplit(landed)
    page = staff_client.get(parts.path + (f"?{parts.query}" if parts.query else ""))
    assert page.status_code == 200, landed
    assert f"<code>{html_lib.escape(key)}</code>" in page.content.decode()


def test_a_dot_tenant_or_key_goes_in_the_query(db):
    """A tenant name may be ``..`` too: either part that a browser would resolve away is
    carried in the query; any other is one quoted path segment."""
    from dashboard.staff.links import pledge_url as link

    assert link("..", "k") == "/pledges/?tenant=..&key=k"
    assert link("acme", ".") == "/pledges/?tenant=acme&key=."
    assert link("acme", "a/../b\\c") == "/pledges/acme/a%2F..%2Fb%5Cc/"


def test_every_pledge_link_is_built_by_pledge_url():
    """Django's ``{% url 'pledge' %}`` and ``reverse("pledge")`` leave ``/``, ``.`` and
    ``..`` of a key as they are: no template or view may link the pledge page so; every
    link goes through ``{% pledge_url %}`` / ``dashboard.staff.links.pledge_url``."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"""\{%\s*url\s+['"]pledge['"]|reverse\(\s*['"]pledge['"]""")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("templates", "dashboard", "reconciliation")
        for path in sorted((root / folder).rglob("*"))
        if path.suffix in (".html", ".py", ".txt")
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
