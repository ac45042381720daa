"""Hostile input on the staff screens: ids that are not case ids (queue counter items,
oversized keys), numbers and dates at the edges of what Python can hold. Each answers a
clear 4xx or the form's own error, never a 500, and starts nothing."""

from __future__ import annotations

import re
import uuid
from urllib.parse import quote

import pytest

from reconciliation.cases.counters import COUNTER_PREFIX, counter_key
from reconciliation.cases.vocabulary import QUEUES
from tests.helpers import audit_events, cases
from tests.reconciliation.factories import stuck_case

pytestmark = pytest.mark.django_db

WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "Checked the consistent reads."}
NOT_CASE_IDS = [
    "#COUNT#STUCK_PENDING",
    "#COUNT#STUCK_PENDING#0",
    "#COUNT#OVERRIDE_REQUESTED#7",
    "C-" + "A" * 3000,
    "é" * 1100,
]
ACTIONS = ("dispose", "override", "assign", "approve", "reject")


def action_form(action: str) -> dict:
    """A form that passes the view's own validation, so the id is what is judged."""
    data = {"seen_version": 1, "action_id": str(uuid.uuid4()), **WHY}
    data.update(
        {
            "dispose": {"disposition": "ESCALATE"},
            "override": {"override": "RELEASE_CLAIM"},
            "assign": {},
            "approve": {"request_id": "r-1"},
            "reject": {"request_id": "r-1"},
        }[action]
    )
    return data


def counters_everywhere(ddb) -> None:
    """Every counter shard of every queue, and the unsharded item of older tables."""
    for queue in QUEUES:
        for key in (COUNTER_PREFIX + queue, *(counter_key(queue, n) for n in range(8))):
            ddb.client.update_item(
                TableName=ddb.tables.cases,
                Key={"case_id": {"S": key}},
                UpdateExpression="ADD open_count :d",
                ExpressionAttributeValues={":d": {"N": "1"}},
            )


@pytest.mark.parametrize("case_id", NOT_CASE_IDS, ids=range(len(NOT_CASE_IDS)))
def test_ids_that_are_not_case_ids_answer_404_on_every_case_url(ddb, supervisor_client, case_id):
    """Queue counter items (sharded and the old unsharded one) and ids over DynamoDB's
    2,048-byte key limit: 404 on the page, its evidence and every action, never read as a
    case, and nothing written."""
    stuck_case("hi-1")
    counters_everywhere(ddb)
    before = (cases(ddb), audit_events(ddb))
    path = f"/cases/{quote(case_id, safe='')}/"
    assert supervisor_client.get(path).status_code == 404
    assert supervisor_client.get(path + "evidence/").status_code == 404
    for action in ACTIONS:
        for extra in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = supervisor_client.post(path + f"{action}/", action_form(action), **extra)
            assert response.status_code == 404, (action, response.status_code)
    assert (cases(ddb), audit_events(ddb)) == before


def test_bulk_action_on_counter_items_and_oversized_ids_reports_no_such_case(ddb, staff_client):
    """Bulk preview and apply with counter ids and oversized ids among real cases: those
    rows say "No such case.", the real cases are handled, no 500."""
    real = stuck_case("hi-2")
    counters_everywhere(ddb)
    ids = [real.case_id, *NOT_CASE_IDS]
    for step in ("preview", "apply"):
        data = {
            "case_ids": ids,
            "disposition": "ESCALATE",
            "step": step,
            "queue": "stuck",
            "action_id": str(uuid.uuid4()),
            **WHY,
        }
        response = staff_client.post("/cases/bulk/", data, HTTP_HX_REQUEST="true")
        body = response.content.decode()
        assert response.status_code == 200, body
        assert body.count("No such case.") == len(NOT_CASE_IDS)
    assert [c["case_id"] for c in cases(ddb)] == [real.case_id]


@pytest.mark.engines("moto")
@pytest.mark.parametrize("value", ["1E-200", "1E+200", "1E-7", "0.001"])
def test_queue_min_amount_out_of_range_is_the_forms_error(ddb, staff_client, value):
    """A minimum amount DynamoDB cannot hold (decimal underflow or overflow) or finer
    than a cent: 400 with the error beside the field; the page still renders."""
    response = staff_client.get("/queues/stuck/", {"min_amount": value})
    html = response.content.decode()
    assert response.status_code == 400
    field = re.search(r'<p class="filter-min_amount">(.*?)</p>', html, re.S)
    assert field and '<span class="error">' in field.group(1), html
    assert "Internal" not in html and "<h1>Queues</h1>" in html


@pytest.mark.engines("moto")
@pytest.mark.parametrize(
    "dates",
    [
        {"since": "0001-01-01", "until": "0001-01-01"},
        {"until": "0001-01-01"},
        {"since": "9999-12-31", "until": "9999-12-31"},
        {"since": "0001-01-03"},
    ],
)
def test_audit_dates_at_the_ends_of_the_calendar_are_form_errors(ddb, auditor_client, dates):
    """Year 1 (or 9999) in audit search, both exports and a background export: 400 with a
    clear message, no export started and no event written."""
    search = auditor_client.get("/audit/", dates)
    assert search.status_code == 400
    assert "errorlist" in search.content.decode() or "range" in search.content.decode()
    for url in ("/audit/export.csv", "/audit/export.jsonl"):
        response = auditor_client.get(url, dates)
        assert response.status_code == 400, url
        assert b"Invalid filters" in response.content
    started = auditor_client.post("/audit/exports/", {**dates, "format": "csv"})
    assert started.status_code == 400
    assert b"Invalid export request" in started.content
    assert audit_events(ddb) == []
