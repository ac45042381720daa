"""The worklist at /worklist/ (docs/worklist.md): every open case across the queues, the
filters and the order from the URL, amounts ordered within each currency, the totals per
currency, "Load more", bad filters answered with a message, and finance staff landing on
it after sign-in."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from reconciliation import clock
from reconciliation.cases.actions import StaffAction
from reconciliation.casework.dispositions import case_assign
from reconciliation.casework.notifications import sla_hours
from reconciliation.casework.worklist import WorklistFilters, worklist_read
from reconciliation.stores import every_store
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM, sign_in, sign_in_form, staff_user
from tests.reconciliation.factories import ambiguous_case, stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}


def listed(html: str) -> list[str]:
    return re.findall(r'<tr[^>]* data-case="([^"]+)"', html)


def _aged(hours: float, make, key: str, **body):
    with clock.travel(-hours * 3600):
        return make(key, **body)


@pytest.fixture
def world(ddb):
    """Four open cases in two queues and two currencies, 5, 3, 2 and 1 hours old. The
    stuck ones first: their sweep's re-check would close an ambiguous case whose pledge
    is recorded."""
    gbp_big = _aged(5, stuck_case, "wl-gbp-466", amount="466.00", currency="GBP", fund="RELIEF")
    gbp_small = _aged(2, stuck_case, "wl-gbp-10", amount="10.00", currency="GBP", fund="RELIEF")
    usd_mid = _aged(3, ambiguous_case, "wl-usd-453", amount="453.00", currency="USD")
    usd_big = _aged(1, ambiguous_case, "wl-usd-900", amount="900.00", currency="USD")
    return {
        "gbp466": gbp_big.case_id,
        "usd453": usd_mid.case_id,
        "gbp10": gbp_small.case_id,
        "usd900": usd_big.case_id,
    }


def test_every_open_case_across_queues_oldest_first(world, staff_client):
    """With no filters the worklist lists both queues' cases, oldest first, with the type
    and state as labels and the client's own key (not tenant#key)."""
    response = staff_client.get("/worklist/")
    html = response.content.decode()
    assert response.status_code == 200
    assert listed(html) == [world["gbp466"], world["usd453"], world["gbp10"], world["usd900"]]
    assert "Stuck claim" in html and "Ambiguous timeout" in html
    assert not re.search(r"<td[^>]*>STUCK_PENDING", html)
    assert ">wl-gbp-466<" in html and "acme#wl-gbp-466" not in html


def test_amount_order_is_within_currency_and_totals_per_currency(world, staff_client):
    """sort=amount groups by currency and orders largest first inside each (466 GBP is
    never compared with 453 USD); the footer totals each currency's count and sum."""
    html = staff_client.get("/worklist/?sort=amount").content.decode()
    assert listed(html) == [world["gbp466"], world["gbp10"], world["usd900"], world["usd453"]]
    assert "never across currencies" in html
    totals = dict(re.findall(r'<tr class="total" data-currency="(\w+)">\s*<th[^>]*>([^<]+)<', html))
    assert totals == {"GBP": "Total GBP: 2 cases", "USD": "Total USD: 2 cases"}
    gbp = re.search(r'data-currency="GBP">.*?<td class="num nowrap">([^<]+)</td>', html, re.S)
    usd = re.search(r'data-currency="USD">.*?<td class="num nowrap">([^<]+)</td>', html, re.S)
    assert "476.00" in gbp.group(1) and "1,353.00" in usd.group(1)
    # The read's own totals are exact decimals, each currency apart.
    result = worklist_read(WorklistFilters(), stores=every_store(), sla_hours=sla_hours())
    assert [(t.currency, t.count, t.amount) for t in result.totals] == [
        ("GBP", 2, Decimal("476.00")),
        ("USD", 2, Decimal("1353.00")),
    ]


FILTERED = [
    ("queue=stuck", ["gbp466", "gbp10"]),
    ("case_type=AMBIGUOUS_TIMEOUT", ["usd453", "usd900"]),
    ("currency=gbp", ["gbp466", "gbp10"]),
    ("fund=relief", ["gbp466", "gbp10"]),
    ("min_age_h=2.5", ["gbp466", "usd453"]),
    ("min_amount=400&max_amount=500", ["gbp466", "usd453"]),
    ("sla=breached", ["gbp466", "usd453"]),
    ("sla=within", ["gbp10"]),
    ("sla=due_soon", ["usd900"]),
    ("assignee=me", ["gbp10"]),
    ("assignee=unassigned", ["gbp466", "usd453", "usd900"]),
    ("sort=sla", ["usd453", "gbp466", "usd900", "gbp10"]),
    ("currency=USD&sort=amount&min_age_h=0.5", ["usd900", "usd453"]),
]


def test_filters_and_order_come_from_the_url(world, client, settings):
    """Each filter in the query string narrows the list (one at a time, a range, and
    combined), and sort=sla puts the most overdue first: SLA of 1.5 h on ambiguous, 4 h on
    stuck (one world for every query: building it costs seconds)."""
    settings.QUEUE_SLA_HOURS = "ambiguous=1.5,stuck=4"
    case_assign(
        case_id=world["gbp10"],
        staff=StaffAction(actor=staff_actor("wl-ada"), seen_version=None),
        store=AS_SYSTEM.store,
    )
    sign_in(client, username="wl-ada")
    for query, expected in FILTERED:
        html = client.get(f"/worklist/?{query}", **HX).content.decode()
        assert listed(html) == [world[k] for k in expected], query


def test_sla_column_says_how_long_is_left_or_over(world, staff_client, settings):
    """The SLA column reads "Past SLA … over" for a breached case and "breaches in …"
    for one still inside its SLA."""
    settings.QUEUE_SLA_HOURS = "ambiguous=2,stuck=4"
    html = staff_client.get("/worklist/").content.decode()

    def row_text(case_id: str) -> str:  # the row's words, its markup left out
        row = re.search(rf'data-case="{case_id}">(.*?)</tr>', html, re.S).group(1)
        return re.sub(r"<[^>]+>", "", row)

    row = row_text(world["gbp466"])
    assert "Past SLA" in row and re.search(r"1 h( 0 min)? over", row)
    row = row_text(world["gbp10"])
    assert "Within SLA" in row and re.search(r"breaches in (1 h 59 min|2 h)", row)


def test_load_more_pages_through_the_same_order(world, staff_client, monkeypatch):
    """With a page of 3 rows the first page links to the rest; the link's page holds the
    one row left, in the same order and with the same filters."""
    from dashboard.staff.views import worklist

    monkeypatch.setattr(worklist, "PAGE_SIZE", 3)
    first = staff_client.get("/worklist/?sort=amount").content.decode()
    assert listed(first) == [world["gbp466"], world["gbp10"], world["usd900"]]
    more = re.search(r'href="(/worklist/\?[^"]+)" hx-get', first).group(1).replace("&amp;", "&")
    assert "sort=amount" in more and "start=3" in more
    assert listed(staff_client.get(more, **HX).content.decode()) == [world["usd453"]]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("currency=12", "three-letter currency"),
        ("sort=biggest", "an order this page offers"),
        ("min_amount=abc", "a non-negative number"),
        ("min_amount=50&max_amount=10", "not less than"),
        ("queue=nowhere", "a queue of this dashboard"),
        ("sla=late", "an SLA state"),
        ("assignee=%3Cscript%3E", "a username"),
        ("format=xlsx", "csv only"),
        ("currency=12&format=csv", "three-letter currency"),
    ],
)
def test_bad_filter_values_answer_a_message_not_a_500(ddb, staff_client, query, message):
    """A value the worklist does not accept is a 400 that names the filter's rule, for
    the page and for its CSV alike."""
    response = staff_client.get(f"/worklist/?{query}")
    assert response.status_code == 400
    assert message in response.content.decode()


@pytest.mark.parametrize(
    ("role", "landing"),
    [("finance_staff", "/worklist/"), ("supervisor", "/"), ("auditor", "/")],
)
def test_landing_after_sign_in_by_role(ddb, client, settings, role, landing):
    """Finance staff land on the worklist; supervisors and auditors on the overview."""
    settings.STAFF_MFA_REQUIRED = False
    staff_user("wl-lander", role, password="Landing-pass-42")
    response = sign_in_form(client, "wl-lander", "Landing-pass-42")
    assert response.status_code == 302 and response["Location"] == landing


@pytest.mark.parametrize(
    ("role", "landing"),
    [("finance_staff", "/worklist/"), ("supervisor", "/"), ("auditor", "/")],
)
def test_opening_the_site_root_signs_in_to_the_roles_landing(ddb, client, settings, role, landing):
    """Opening http://…/ signed out sends to sign-in with ``?next=/``: the site's root,
    not a page asked for, so each role still lands on its own first page."""
    settings.STAFF_MFA_REQUIRED = False
    staff_user("wl-root", role, password="Landing-pass-42")
    asked = client.get("/")
    assert asked.status_code == 302 and asked["Location"] == "/accounts/login/?next=/"
    response = client.post(
        asked["Location"], {"username": "wl-root", "password": "Landing-pass-42"}
    )
    assert response.status_code == 302 and response["Location"] == landing


def test_next_still_wins_after_sign_in(ddb, client):
    """?next= sends finance staff where they were going, not to the worklist."""
    staff_user("wl-next", "finance_staff", password="Landing-pass-42")
    response = client.post(
        "/accounts/login/?next=/queues/stuck/",
        {"username": "wl-next", "password": "Landing-pass-42"},
    )
    assert response.status_code == 302 and response["Location"] == "/queues/stuck/"


def test_nav_links_the_worklist_for_every_role(ddb, client):
    """The top navigation links the worklist for each role that sees queues."""
    for role in ("finance_staff", "supervisor", "auditor"):
        client.logout()
        sign_in(client, role, username=f"wl-nav-{role}")
        assert '<a href="/worklist/"' in client.get("/").content.decode(), role


def _worklist_calls(client) -> int:
    """The DynamoDB calls the worklist's answer says it made (``Server-Timing``)."""
    response = client.get("/worklist/")
    assert response.status_code == 200
    timing = re.search(r'ddb;desc="(\d+) calls"', response["Server-Timing"])
    assert timing is not None
    return int(timing.group(1))


def test_worklist_reads_each_queue_in_one_query(ddb, staff_client):
    """An open case in each queue, then 110 more stuck ones (more than a queue page of
    100): the worklist makes the same calls, one BatchGetItem of the counters, one Query
    per queue, one BatchGetItem of the page's donor refs (it read each queue 100 rows a
    Query: 2 Queries a queue past 100, 6 at the cap of 500)."""
    from bench.open_cases import open_cases_seed
    from reconciliation.cases.vocabulary import QUEUES

    store = AS_SYSTEM.store
    open_cases_seed(store.client, store.tables.cases, 1, threads=1)
    few = _worklist_calls(staff_client)
    open_cases_seed(
        store.client, store.tables.cases, 110, queues=["STUCK_PENDING"], tag="more", threads=1
    )
    many = _worklist_calls(staff_client)
    assert few == many == 1 + len(QUEUES) + 1


def test_the_list_reads_what_it_orders_by_and_shows_its_page_whole(world, client):
    """Each queue's Query returns only what the list filters, orders and totals by
    (parsing hundreds of whole rows was most of the page's time); the rows of the page
    are then read whole, in the BatchGetItem that reads their donor refs, so a row
    still shows its state, fund, client key, donor ref and assignee."""
    from reconciliation.casework.worklist import ROW_ATTRIBUTES

    case_assign(
        case_id=world["gbp10"],
        staff=StaffAction(actor=staff_actor("wl-bea"), seen_version=None),
        store=AS_SYSTEM.store,
    )
    sign_in(client, username="wl-bea")
    asked: list[dict] = []

    def note(params, **_):
        if params.get("IndexName") == "open_by_queue":
            asked.append(params)

    events = AS_SYSTEM.store.client.meta.events
    events.register("provide-client-params.dynamodb.Query", note, unique_id="wl-note")
    try:
        html = client.get("/worklist/").content.decode()
    finally:
        events.unregister("provide-client-params.dynamodb.Query", unique_id="wl-note")
    assert asked
    for params in asked:
        names = params["ExpressionAttributeNames"]
        returned = {names[n.strip()] for n in params["ProjectionExpression"].split(",")}
        assert returned == set(ROW_ATTRIBUTES)
    row = re.search(rf'data-case="{world["gbp10"]}">(.*?)</tr>', html, re.S).group(1)
    words = re.sub(r"<[^>]+>", "", row)  # a username may carry a <wbr> after its hyphen
    for shown in ("wl-bea", "D-1001", "RELIEF", "wl-gbp-10", "Stuck"):
        assert shown in words, (shown, words)


def test_empty_fields_leave_the_worklist_url(world, staff_client):
    """The filter form sends every field, empty ones too: a plain GET is redirected to the
    URL without them (the same list), and the form's htmx request is told to push that
    URL; an already tidy URL is answered as it is."""
    sent = "/worklist/?queue=&case_type=&fund=&currency=USD&sort=amount&min_age_h="
    plain = staff_client.get(sent)
    assert plain.status_code == 302 and plain["Location"] == "/worklist/?currency=USD&sort=amount"
    tidy = staff_client.get(plain["Location"])
    assert tidy.status_code == 200 and "HX-Push-Url" not in tidy
    swapped = staff_client.get(sent, **HX)
    assert swapped.status_code == 200
    assert swapped["HX-Push-Url"] == "/worklist/?currency=USD&sort=amount"
    assert listed(swapped.content.decode()) == listed(
        staff_client.get(plain["Location"], **HX).content.decode()
    )
    cleared = staff_client.get("/worklist/?queue=&fund=")
    assert cleared.status_code == 302 and cleared["Location"] == "/worklist/"
