"""``?format=csv`` on every case list (docs/worklist.md): the worklist, a queue, case search
results and the resolved history answer the page's rows, with its filters, as a streamed
CSV attachment that no cache keeps; a cell a spreadsheet would read as a formula is
neutralised; the download is an audited export naming the list and its filters."""

from __future__ import annotations

import csv
import io

import pytest

from reconciliation.casework.dispositions import case_dispose
from tests.helpers import acting, audit_events, sign_in
from tests.reconciliation.factories import ambiguous_case, stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

# An idempotency key a spreadsheet would run as a formula (a donor ref cannot start so).
FORMULA_KEY = "=HYPERLINK(1)"
DONOR = "D-466"


def download(client, url: str) -> tuple[list[dict], object]:
    """The CSV's rows (as dicts) and the response, after checking the response is a
    streamed, uncached CSV attachment."""
    response = client.get(url)
    assert response.status_code == 200, response.content
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="')
    assert "no-store" in response["Cache-Control"]
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body))), response


def export_event(ddb, response) -> dict:
    [event] = audit_events(ddb, f"EXPORT#{response['X-Audit-Export-Id']}")
    assert event["action"] == "export_downloaded"
    return event


@pytest.fixture
def cases(ddb):
    """Two stuck cases: one in GBP whose key looks like a formula, one in USD."""
    risky = stuck_case(FORMULA_KEY, donor_ref=DONOR, currency="GBP", amount="466.00")
    plain = stuck_case("csv-plain", donor_ref="D-2", currency="USD", amount="453.00")
    return risky, plain


def test_worklist_csv_has_the_filtered_rows_formula_safe_and_audited(ddb, client, cases):
    """The worklist's CSV holds the rows its filters keep; the formula-like key starts
    with an apostrophe; an export_downloaded event names the list and filters."""
    risky, _ = cases
    user = sign_in(client)
    rows, response = download(client, "/worklist/?currency=GBP&format=csv")
    assert [r["case_id"] for r in rows] == [risky.case_id]
    assert rows[0]["client_key"] == "'" + FORMULA_KEY
    assert rows[0]["donor_ref"] == DONOR
    assert (rows[0]["case_type"], rows[0]["amount"], rows[0]["currency"]) == (
        "Stuck claim",
        "466.00",
        "GBP",
    )
    event = export_event(ddb, response)
    assert event["actor"]["username"] == user.username
    assert event["detail"] == {
        "list": "worklist",
        "name": "worklist",
        "filters": {"currency": "GBP"},
        "format": "csv",
    }


def test_queue_csv_keeps_the_queue_filters(ddb, auditor_client, cases):
    """A queue's CSV holds that queue's rows with the page's filters (here a minimum
    amount), and its event names the queue."""
    _, plain = cases
    rows, response = download(auditor_client, "/queues/stuck/?min_amount=460&format=csv")
    assert [r["case_id"] for r in rows] == [cases[0].case_id]
    rows, response = download(auditor_client, "/queues/stuck/?sort=amount&format=csv")
    assert [r["case_id"] for r in rows] == [plain.case_id, cases[0].case_id]
    assert rows[1]["client_key"] == "'" + FORMULA_KEY
    detail = export_event(ddb, response)["detail"]
    assert (detail["list"], detail["name"], detail["filters"]) == (
        "queue",
        "stuck",
        {"sort": "amount"},
    )


def test_case_search_csv_has_the_found_cases(ddb, supervisor_client, cases):
    """Case search's CSV holds what the search found (by donor ref here), audited."""
    risky, _ = cases
    rows, response = download(supervisor_client, f"/cases/?q={DONOR}&format=csv")
    assert [r["case_id"] for r in rows] == [risky.case_id]
    assert rows[0]["client_key"] == "'" + FORMULA_KEY
    detail = export_event(ddb, response)["detail"]
    assert (detail["list"], detail["filters"]) == ("search", {"q": DONOR})


def test_resolved_csv_has_who_resolved_and_how(ddb, staff_client):
    """The resolved history's CSV lists the resolved case with who and how, audited."""
    case = ambiguous_case("csv-resolved", donor_ref="D-9")
    case_dispose(
        disposition="CONFIRMED_COMMITTED",
        **acting("bob").on(
            case, reason_code="EVIDENCE_CONFIRMS", reason_text="The pledge read back is there."
        ),
    )
    rows, response = download(staff_client, "/queues/resolved/?resolved_by=bob&format=csv")
    assert [(r["case_id"], r["resolved_by"], r["donor_ref"]) for r in rows] == [
        (case.case_id, "bob", "D-9")
    ]
    assert rows[0]["resolved_how"]
    detail = export_event(ddb, response)["detail"]
    assert (detail["list"], detail["filters"]) == ("resolved", {"resolved_by": "bob"})


@pytest.mark.parametrize(
    "url",
    [
        "/queues/stuck/?min_amount=abc&format=csv",
        "/queues/resolved/?since=yesterday&format=csv",
        "/queues/stuck/?format=pdf",
        "/cases/?q=a%0Ab&format=csv",
    ],
)
def test_bad_filters_on_a_csv_are_a_message_and_no_export(ddb, staff_client, url):
    """A bad filter or format on a list's CSV is a 400 that says what is wrong, and no
    export event is written."""
    response = staff_client.get(url)
    assert response.status_code == 400
    assert response.content.decode().strip()
    assert audit_events(ddb, "EXPORT#") == []


def test_each_list_page_links_its_csv_with_its_filters(ddb, staff_client, cases):
    """The worklist and a queue page link their CSV with the filters in force."""
    worklist = staff_client.get("/worklist/?currency=GBP").content.decode()
    assert 'href="/worklist/?currency=GBP&amp;format=csv">CSV</a>' in worklist
    queue = staff_client.get("/queues/stuck/?min_amount=10").content.decode()
    assert 'href="/queues/stuck/?min_amount=10&amp;format=csv">CSV</a>' in queue
