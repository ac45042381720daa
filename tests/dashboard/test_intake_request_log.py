"""The intake request log: every answer the intake API gives for a key (time,
status, outcome kind or error code, replay or not, correlation id; no donor data beyond
the ref) is kept with a TTL and shown on the key's pledge page; a key refused before
anything was written (422 key reuse, 400 unknown fund) is found and has a page; refused
requests are listed per tenant and day, those without a key there only. A 201's entry is
an item of the commit's transaction; every other answer's is buffered and written off the
request path, so a failing log write never changes the client's answer."""

from __future__ import annotations

import logging
import re

import pytest
from botocore.exceptions import ClientError
from django.test import Client

from reconciliation import clock
from reconciliation.claims.request_log_buffer import request_log_flush
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM, scan_all, sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def staff(role: str = "finance_staff") -> Client:
    client = Client()
    sign_in(client, role, username=f"log-{role}")
    return client


def log_items(ddb) -> list[dict]:
    return scan_all(ddb, ddb.tables.requests)


def test_every_answer_for_a_key_is_on_its_pledge_page(ddb, api, settings):
    """201, a replay (200), a reused key (422) and a lookup (200) of one key: four
    entries on its page, newest first, the replay marked once, each with its correlation
    id; the stored entries hold the donor ref but no amount, fund or body (the 422 alone
    keeps what it asked, as ``asked``), and a TTL of REQUEST_LOG_TTL_S."""
    settings.REQUEST_LOG_TTL_S = 86400 * 3
    first = api.post("log-1", pledge_body(donor_ref="D-LOG"), HTTP_X_REQUEST_ID="req-first-1")
    assert first.status_code == 201
    assert api.post("log-1", pledge_body(donor_ref="D-LOG")).status_code == 200
    assert api.post("log-1", pledge_body(donor_ref="D-LOG", amount="9.00")).status_code == 422
    assert api.get("log-1").status_code == 200
    assert request_log_flush().written == 3  # the 201's was written by its commit
    html = staff("auditor").get("/pledges/acme/log-1/").content.decode()
    log = html.split('id="requests-h"')[1].split("</section>")[0]
    assert [s for s in ("HTTP 201", "HTTP 200", "HTTP 422") if s in log] == [
        "HTTP 201",
        "HTTP 200",
        "HTTP 422",
    ]
    assert log.count("<li>") == 4 and log.count(">replay<") == 1
    assert log.count(">with the pledge<") == 1
    assert log.index("HTTP 422") < log.index("HTTP 201")  # newest first
    assert "<code>req-first-1</code>" in log
    items = log_items(ddb)
    assert len(items) == 4
    for item in items:
        assert not {"amount", "fund", "currency", "body", "request"} & set(item)
        assert ("asked" in item) == (item["outcome"] == "idempotency_key_reused")
        assert item["donor_ref"] == "D-LOG"
        at = clock.parse_iso(item["at"])
        assert int(item["purge_at"]) == int(at.timestamp()) + 86400 * 3


def test_a_key_refused_before_anything_was_written_is_found_and_has_a_page(ddb, api):
    """A 400 unknown fund writes no claim and no pledge; before, it left no trace. Its
    answer is found by the key and shown, with its error code, on the key's page."""
    answer = api.post("log-fund", pledge_body(fund="NOPE"))
    assert answer.status_code == 400 and answer.json()["error"] == "unknown_fund"
    request_log_flush()
    client = staff()
    found = client.get("/cases/?q=log-fund").content.decode()
    assert 'href="/pledges/acme/log-fund/"' in found
    page = client.get("/pledges/acme/log-fund/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "No pledge is recorded for this key" in html
    assert "HTTP 400" in html and "<code>unknown_fund</code>" in html


def test_refused_requests_are_listed_per_tenant_with_their_codes(ddb, api):
    """A request with no key (listed under the tenant only), an unknown fund and a
    reused key are listed for the tenant's day with their error codes; an accepted one
    is not; a bad day is a 400 with a message."""
    assert api.post(None, pledge_body()).status_code == 400
    assert api.post("log-r1", pledge_body(fund="NOPE")).status_code == 400
    assert api.post("log-r2", pledge_body()).status_code == 201
    assert api.post("log-r2", pledge_body(amount="7.00")).status_code == 422
    request_log_flush()
    client = staff("supervisor")
    page = client.get(f"/requests/rejected/?tenant=acme&day={clock.now().date().isoformat()}")
    html = page.content.decode()
    assert page.status_code == 200
    for shown in (
        "<code>missing_key</code>",
        "<code>unknown_fund</code>",
        "<code>idempotency_key_reused</code>",
        "no key",
    ):
        assert shown in html, shown
    assert html.count("<strong>HTTP 4") == 3 and "HTTP 201" not in html
    assert 'href="/pledges/acme/log-r1/"' in html
    # The no-key request is under the tenant, not on any key's page.
    subjects = {i["subject"] for i in log_items(ddb) if i.get("outcome") == "missing_key"}
    assert subjects == {"TENANT#acme"}
    assert client.get("/requests/rejected/?tenant=acme").status_code == 200  # today
    bad = client.get("/requests/rejected/?tenant=acme&day=31-12-2026")
    assert bad.status_code == 400 and 'role="alert"' in bad.content.decode()
    assert client.get("/requests/rejected/?tenant=nobody").status_code == 400


def _refuse_batch_writes(client) -> None:
    """Every BatchWriteItem of ``client`` is refused as a missing table would be."""

    def refuse(**_kwargs):
        raise ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "BatchWriteItem")

    client.meta.events.register("before-call.dynamodb.BatchWriteItem", refuse)


def test_a_failing_log_write_never_changes_the_answer(ddb, api, caplog):
    """The log's table refuses every buffered write: the client gets the same replay and
    refusal as ever (answered before anything is written), the flush counts each entry
    it could not write, and only the first failure is logged."""
    from reconciliation.claims import request_log_buffer
    from reconciliation.metrics import INTAKE_REQUEST_LOG_FAILED

    created = api.post("log-fail", pledge_body())
    assert created.status_code == 201
    _refuse_batch_writes(AS_SYSTEM.store.client)
    request_log_buffer._first_failure_logged.clear()
    counted = INTAKE_REQUEST_LOG_FAILED.labels("ResourceNotFoundException")
    before = counted._value.get()
    with caplog.at_level(logging.WARNING, logger="reconciliation.claims.request_log_buffer"):
        replay = api.post("log-fail", pledge_body())
        reused = api.post("log-fail", pledge_body(amount="8.00"))
        assert replay.status_code == 200 and reused.status_code == 422
        assert replay["Idempotent-Replayed"] == "true" and replay.json() == created.json()
        assert request_log_flush().failed == 2
        api.get("log-fail")
        assert request_log_flush().failed == 1
    assert counted._value.get() == before + 3
    assert len([r for r in caplog.records if "request log write failed" in r.message]) == 1
    assert [i["outcome"] for i in log_items(ddb)] == ["created"]  # the commit's


@pytest.mark.engines("moto", "dynamodb_local")
def test_a_new_pledges_log_entry_is_an_item_of_its_commit(ddb, api):
    """The 201's entry is the fifth item of the commit's TransactWriteItems (a Put on the
    requests table, after the pledge, ledger, receipt and claim) and is stored when the
    answer comes; the replay's and the 422's wait in the buffer until it is flushed,
    then one BatchWriteItem writes both."""
    sent: list[tuple[str, dict]] = []

    def seen(params, model, **_kwargs):
        sent.append((model.name, params))

    AS_SYSTEM.store.client.meta.events.register("provide-client-params.dynamodb", seen)
    assert api.post("log-tx", pledge_body(donor_ref="D-TX")).status_code == 201
    [commit] = [p for name, p in sent if name == "TransactWriteItems"]
    tables = [next(iter(item.values()))["TableName"] for item in commit["TransactItems"]]
    assert tables == [
        ddb.tables.pledges,
        ddb.tables.ledger,
        ddb.tables.audit_events,
        ddb.tables.idempotency_keys,
        ddb.tables.requests,
    ]
    assert list(commit["TransactItems"][4]) == ["Put"]
    [stored] = log_items(ddb)
    assert stored["outcome"] == "created" and "status" not in stored
    assert stored["subject"] == "KEY#acme#log-tx" and stored["donor_ref"] == "D-TX"
    assert stored["correlation_id"]  # the request's, as its claim recorded it

    assert api.post("log-tx", pledge_body(donor_ref="D-TX")).status_code == 200
    assert api.post("log-tx", pledge_body(donor_ref="D-TX", amount="1.00")).status_code == 422
    assert len(log_items(ddb)) == 1
    before = len(sent)
    assert request_log_flush().written == 2
    assert [name for name, _ in sent[before:]] == ["BatchWriteItem"]
    assert sorted(i["outcome"] for i in log_items(ddb)) == [
        "created",
        "idempotency_key_reused",
        "replayed",
    ]


@pytest.mark.engines("moto", "dynamodb_local")
@pytest.mark.fresh_tables  # its requests table is deleted
def test_a_new_pledge_is_recorded_with_its_log_entry_or_not_at_all(ddb, api):
    """The requests table is missing: the commit that carries the 201's entry is refused
    as a whole, so nothing is recorded (no pledge, no ledger change) and the client hears
    a definite JSON 503, never a 201 whose entry is missing."""
    ddb.client.update_table(TableName=ddb.tables.requests, DeletionProtectionEnabled=False)
    ddb.client.delete_table(TableName=ddb.tables.requests)
    ddb.client.get_waiter("table_not_exists").wait(
        TableName=ddb.tables.requests, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    answer = api.post("log-none", pledge_body())
    assert answer.status_code == 503 and answer.json()["error"] == "dynamodb_unavailable"
    assert scan_all(ddb, ddb.tables.pledges) == []
    assert scan_all(ddb, ddb.tables.ledger) == []


def test_a_reused_keys_answer_shows_what_it_asked_beside_what_the_key_recorded(ddb, api):
    """The 422 row on the pledge page lists the refused request's amount, currency, fund
    and donor ref beside the recorded pledge's, marking the fields that differ."""
    assert api.post("log-ask", pledge_body(donor_ref="D-ASK")).status_code == 201
    reused = pledge_body(donor_ref="D-ASK", amount="9.5", fund="GENERAL")
    assert api.post("log-ask", reused).status_code == 422
    request_log_flush()
    html = staff().get("/pledges/acme/log-ask/").content.decode()
    log = html.split('id="requests-h"')[1].split("</section>")[0]
    rows = re.findall(r"<tr(?: class=\"differs\")?><th scope=\"row\">(.*?)</tr>", log, re.S)
    cells = [re.sub(r"<[^>]+>", " ", row).split() for row in rows]
    assert cells == [
        ["Amount", "9.50", "differs", "25.00"],
        ["Currency", "USD", "USD"],
        ["Fund", "GENERAL", "GENERAL"],
        ["Donor", "ref", "D-ASK", "D-ASK"],
    ]
    assert log.count('class="differs"') == 1
