"""Queue triage: sorting by age, amount and fund through the column
headers, the amount at risk per currency kept in the queue counters, the case-id column
and the decoded reason in the cancelled queue."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.casework.selectors import queue_counters
from tests.helpers import AS_SYSTEM, acting, repositories, shown_intents
from tests.reconciliation.factories import key_reuse_case, stuck_case

ADA = acting("ada")

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}


def shown(html: str) -> list[str]:
    """Intent ids of the table rows, in order."""
    return shown_intents(html)


def three_cases():
    with clock.travel(-3 * 3600):
        stuck_case("s-old", amount="20.00", fund="BUILDING")
    with clock.travel(-2 * 3600):
        stuck_case("s-mid", amount="500.00", fund="GENERAL")
    stuck_case("s-new", amount="75.00", fund="ARTS")


def test_sorting_by_age_amount_and_fund(ddb, staff_client):
    """Each order reads its own index, across the whole queue: oldest (default),
    newest, largest and smallest amount, fund A–Z and Z–A."""
    three_cases()
    orders = {
        "": ["acme#s-old", "acme#s-mid", "acme#s-new"],
        "newest": ["acme#s-new", "acme#s-mid", "acme#s-old"],
        "amount_desc": ["acme#s-mid", "acme#s-new", "acme#s-old"],
        "amount": ["acme#s-old", "acme#s-new", "acme#s-mid"],
        "fund": ["acme#s-new", "acme#s-old", "acme#s-mid"],
        "fund_desc": ["acme#s-mid", "acme#s-old", "acme#s-new"],
    }
    for sort, expected in orders.items():
        html = staff_client.get(f"/queues/stuck/?sort={sort}", **HX).content.decode()
        assert shown(html) == expected, sort
        # Every order's index carries every column the table shows.
        row = html[html.find("s-mid</code>") :]
        assert '<td data-label="Fund">GENERAL</td>' in row and "500.00" in row, sort


def test_sort_headers_keep_filters_and_reverse(ddb, staff_client):
    """The column headers are links that keep the filters, drop the cursor, mark the
    current order with aria-sort and reverse it on a second click; the page says the
    order it shows."""
    three_cases()
    html = staff_client.get("/queues/stuck/?min_amount=10&sort=amount_desc").content.decode()
    assert (
        'aria-sort="descending"><a class="sort" href="/queues/stuck/?min_amount=10&amp;sort=amount"'
        in html
    )
    assert 'href="/queues/stuck/?min_amount=10&amp;sort=oldest"' in html
    assert "open cases, largest amount first" in html
    assert 'name="sort" value="amount_desc"' in html  # the filter form keeps the order


def test_sorted_pages_follow_the_cursor_and_bind_it_to_the_order(ddb, staff_client):
    """Load more continues in the sorted order; a cursor from another order is refused
    with 400, never a 500."""
    from dashboard.staff.views import queues

    three_cases()
    original = queues.PAGE_SIZE
    queues.PAGE_SIZE = 2
    try:
        first = staff_client.get("/queues/stuck/?sort=amount_desc").content.decode()
        assert shown(first) == ["acme#s-mid", "acme#s-new"]
        more = re.search(r'href="(/queues/stuck/\?[^"]*cursor=[^"]+)"', first).group(1)
        more = more.replace("&amp;", "&")
        assert shown(staff_client.get(more, **HX).content.decode()) == ["acme#s-old"]
        other = staff_client.get(more.replace("sort=amount_desc", "sort=fund"))
        assert other.status_code == 400
    finally:
        queues.PAGE_SIZE = original
    assert staff_client.get("/queues/stuck/?sort=bogus").status_code == 400


def test_amount_at_risk_per_currency_moves_with_open_resolve_and_reassign(ddb, staff_client):
    """The counters carry each currency's total: opening adds, escalating moves the
    amount to the Escalated queue, resolving subtracts; assignment moves nothing."""
    a = stuck_case("t-1", amount="100.00")
    stuck_case("t-2", amount="50.25")
    stuck_case("t-3", amount="7.00", currency="EUR")
    counters = queue_counters(store=AS_SYSTEM.store)
    assert counters["STUCK_PENDING"].count == 3
    assert counters["STUCK_PENDING"].shown_amounts() == [
        ("EUR", Decimal("7.00")),
        ("USD", Decimal("150.25")),
    ]
    a = case_assign(**ADA.on(a)).case
    assert queue_counters(store=AS_SYSTEM.store)["STUCK_PENDING"].amounts["USD"] == Decimal(
        "150.25"
    )
    why = {"reason_code": "NEEDS_REVIEW", "reason_text": "These need a closer look."}
    a = case_dispose(disposition="ESCALATE", **ADA.on(a, **why)).case
    counters = queue_counters(store=AS_SYSTEM.store)
    assert counters["STUCK_PENDING"].amounts["USD"] == Decimal("50.25")
    assert counters["ESCALATED"].shown_amounts() == [("USD", Decimal("100.00"))]
    page = staff_client.get("/queues/stuck/").content.decode()
    assert ": 2 open</strong>" in page
    assert 'data-currency="USD">' in page and "50.25" in page and 'data-currency="EUR">' in page
    overview = staff_client.get("/").content.decode()
    assert 'data-currency="USD"' in overview and "150.25" in overview


def test_counters_written_before_totals_are_reported_not_miscounted(ddb, staff_client):
    """A case opened before totals were kept (no in_totals) counts but moves no
    amount, and the page says how many cases the total leaves out."""
    case = stuck_case("legacy-1", amount="300.00")
    store = AS_SYSTEM.store
    # As stored before this change: no in_totals, and counters with counts only.
    store.client.update_item(
        TableName=store.tables.cases,
        Key={"case_id": {"S": case.case_id}},
        UpdateExpression="REMOVE in_totals",
    )
    for n in range(8):
        store.client.update_item(
            TableName=store.tables.cases,
            Key={"case_id": {"S": f"#COUNT#STUCK_PENDING#{n}"}},
            UpdateExpression="REMOVE totalled, amount_USD",
        )
    stuck_case("new-1", amount="10.00")
    counter = queue_counters(store=store)["STUCK_PENDING"]
    assert (counter.count, counter.totalled, counter.untotalled) == (2, 1, 1)
    page = staff_client.get("/queues/stuck/").content.decode()
    assert "1 case opened before amounts were totalled is not in this total" in page


def test_case_id_column_and_cancelled_reason_column(ddb, staff_client):
    """Every queue shows the case id; the cancelled queue shows the decoded reason in
    words, not the raw DynamoDB code."""
    case = key_reuse_case(ddb, "c-1")
    html = staff_client.get("/queues/cancelled/").content.decode()
    assert f'<td class="mono case-id"><a href="/cases/{case.case_id}/">{case.case_id}</a>' in html
    assert '<th scope="col">Reason</th>' in html
    cell = re.search(
        r'<td class="reason" data-label="Reason" title="([^"]*)">'
        r'<span class="reason-text">([^<]*)</span></td>',
        html,
    )
    assert cell.group(2).strip() not in ("", "—") and "ConditionalCheckFailed" not in cell.group(2)
    # The cell is the first clause; the whole explanation is on hover.
    assert cell.group(2).startswith(
        "The pledge for this intent already exists (the durable record); "
    )
    assert "must not be applied again" not in cell.group(2)
    assert "must not be applied again" in cell.group(1)
    assert '<th scope="col">Reason</th>' not in staff_client.get("/queues/stuck/").content.decode()


def test_backfill_brings_older_cases_into_totals_search_and_history(ddb, staff_client):
    """Cases written before those keys existed (no in_totals, donor_ref or resolved keys)
    are brought up to date by backfill_cases: the open one's amount joins the totals, the
    donor ref finds it, the resolved one is listed; a second run changes nothing."""
    from django.core.management import call_command

    from reconciliation.casework.dispositions import case_dispose as dispose
    from tests.reconciliation.factories import ambiguous_case

    store = AS_SYSTEM.store
    open_case = stuck_case("old-open", amount="300.00", donor_ref="D-OLD")
    done = ambiguous_case("old-done")
    dispose(
        disposition="CONFIRMED_COMMITTED",
        **ADA.on(
            done, reason_code="EVIDENCE_CONFIRMS", reason_text="The pledge read back is there."
        ),
    )
    for case_id in (open_case.case_id, done.case_id):
        store.client.update_item(
            TableName=store.tables.cases,
            Key={"case_id": {"S": case_id}},
            UpdateExpression="REMOVE in_totals, donor_ref, donor_key, resolved_month, "
            "resolved_sort, resolved_by, resolved_how",
        )
    for n in range(8):
        store.client.update_item(
            TableName=store.tables.cases,
            Key={"case_id": {"S": f"#COUNT#STUCK_PENDING#{n}"}},
            UpdateExpression="REMOVE totalled, amount_USD",
        )
    assert "No resolved cases" in staff_client.get("/queues/resolved/").content.decode()
    assert queue_counters(store=store)["STUCK_PENDING"].untotalled == 1
    assert open_case.case_id not in staff_client.get("/cases/?q=d-old").content.decode()
    call_command("backfill_cases")
    counter = queue_counters(store=store)["STUCK_PENDING"]
    assert (counter.untotalled, counter.amounts["USD"]) == (0, Decimal("300.00"))
    # The folded donor key too: found by its ref in any letter case.
    assert open_case.case_id in staff_client.get("/cases/?q=d-old").content.decode()
    assert done.case_id in staff_client.get("/queues/resolved/").content.decode()
    from io import StringIO

    out = StringIO()
    call_command("backfill_cases", stdout=out)
    assert " 0 updated" in out.getvalue()
    assert queue_counters(store=store)["STUCK_PENDING"].amounts["USD"] == Decimal("300.00")


def test_a_case_without_a_fund_is_stored_and_listed(ddb, staff_client):
    """An index key may not be an empty string in DynamoDB: a case whose request named
    no fund is stored without the attribute (out of the fund order only), read back
    with an empty fund, and listed in its queue."""
    from dataclasses import replace

    from reconciliation.cases.models import case_to_item
    from reconciliation.cases.repository import CaseRepository
    from reconciliation.dynamo.items import transact_items

    template = stuck_case("nofund-1")
    case = replace(template, case_id="C-AAAAAAAAAAAAAAAB", fund="", donor_ref=None)
    assert "fund" not in case_to_item(case)
    store = AS_SYSTEM.store
    store.client.transact_write_items(
        TransactItems=transact_items([CaseRepository(store).put_new_item(case)])
    )
    assert CaseRepository(store).get(case.case_id).fund == ""
    assert "C-AAAAAAAAAAAAAAAB" in staff_client.get("/queues/stuck/").content.decode()


@pytest.mark.engines("dynamodb_local")
def test_a_sorted_page_filters_on_its_own_index_key(ddb, staff_client):
    """Sorting by amount with a minimum amount, or by fund with a fund filter: DynamoDB
    refuses a FilterExpression on the Query's key attributes, so the bound goes into the
    key condition (AWS's own engine; moto lets it through)."""
    three_cases()
    for query, expected in (
        ("sort=amount_desc&min_amount=50", ["acme#s-mid", "acme#s-new"]),
        ("sort=amount&min_amount=50", ["acme#s-new", "acme#s-mid"]),
        ("sort=fund&fund=GENERAL", ["acme#s-mid"]),
        ("sort=fund_desc&fund=ARTS&min_amount=10", ["acme#s-new"]),
        ("sort=amount&fund=BUILDING", ["acme#s-old"]),
    ):
        response = staff_client.get(f"/queues/stuck/?{query}", **HX)
        assert response.status_code == 200, query
        assert shown(response.content.decode()) == expected, query


def _untotalled(store, case_id: str) -> None:
    """Make a case look written before the totals were kept."""
    store.client.update_item(
        TableName=store.tables.cases,
        Key={"case_id": {"S": case_id}},
        UpdateExpression="REMOVE in_totals",
    )
    for n in range(8):
        store.client.update_item(
            TableName=store.tables.cases,
            Key={"case_id": {"S": f"#COUNT#STUCK_PENDING#{n}"}},
            UpdateExpression="REMOVE totalled, amount_USD",
        )


def test_totals_never_drift_when_backfill_races_a_change_or_itself(ddb, monkeypatch):
    """An older case (not in the totals): a change computed from a read made before
    backfill_cases added it is refused as a changed case (it would have left the amount
    in the old queue's total and overwritten the mark); two backfills working from the
    same read add the amount once."""
    from reconciliation.cases.backfill import cases_backfill
    from reconciliation.cases.changes import CaseChanged
    from reconciliation.casework.dispositions import case_dispose as dispose

    store = AS_SYSTEM.store
    case = stuck_case("race-old", amount="300.00")
    _untotalled(store, case.case_id)
    stale = repositories().cases.get(case.case_id)
    assert not stale.in_totals

    # Two runs from the same scan: capture the page once, replay it to a second run.
    pages = list(store.client.get_paginator("scan").paginate(TableName=store.tables.cases))
    assert cases_backfill(store).totalled == 1

    class Replay:
        def paginate(self, **_kwargs):
            return iter(pages)

    monkeypatch.setattr(store.client, "get_paginator", lambda _name: Replay())
    second = cases_backfill(store)
    monkeypatch.undo()
    assert second.totalled == 0 and case.case_id in second.skipped
    counter = queue_counters(store=store)["STUCK_PENDING"]
    assert (counter.untotalled, counter.amounts["USD"]) == (0, Decimal("300.00"))

    # A change from the read before the backfill (the service read the case, then the
    # backfill ran, then the service wrote): refused, nothing moved.
    from reconciliation.cases.repository import CaseRepository

    real_get = CaseRepository.get
    reads = iter([stale])
    monkeypatch.setattr(
        CaseRepository,
        "get",
        lambda self, case_id, **kw: next(reads, None) or real_get(self, case_id, **kw),
    )
    with pytest.raises(CaseChanged):
        dispose(
            disposition="ESCALATE",
            **ADA.on(
                stale, reason_code="NEEDS_REVIEW", reason_text="A closer look is needed here."
            ),
        )
    monkeypatch.undo()
    counters = queue_counters(store=store)
    assert counters["STUCK_PENDING"].amounts["USD"] == Decimal("300.00")
    assert counters["ESCALATED"].count == 0
    # From a fresh read the change goes through and the amount moves with the case.
    fresh = repositories().cases.get(case.case_id)
    dispose(
        disposition="ESCALATE",
        **ADA.on(fresh, reason_code="NEEDS_REVIEW", reason_text="A closer look is needed here."),
    )
    counters = queue_counters(store=store)
    assert counters["STUCK_PENDING"].amounts.get("USD", Decimal(0)) == Decimal(0)
    assert counters["ESCALATED"].amounts["USD"] == Decimal("300.00")


def test_the_reason_cell_is_the_first_clause_of_each_reason_once():
    """A conflict's explanation is cut at its first clause whatever separates it, and
    two items failing for the same reason read once."""
    from reconciliation.casework.selectors import _reason
    from reconciliation.dynamo.cancellation import DecodedReason

    conflict = {
        "code": "TransactionConflict",
        "explanation": "Another request was changing this item at the same moment; "
        "nothing was written and the same request can be retried with the same token.",
    }
    rows = [conflict, dict(conflict), {"code": "None", "explanation": "x"}]
    short, full = _reason([DecodedReason.from_json(r) for r in rows])
    assert short == "Another request was changing this item at the same moment"
    assert full.count("Another request") == 2
