"""Compound faults through the HTTP API (docs/design.md §4 outcome table and outcome rule, §8
fault names): what the client must be told, and what must be left in the tables, when
a commit applied but every answer says otherwise, when the case cannot be written, and
when DynamoDB refuses the call itself.

These faults answer at the HTTP layer, so they run on DynamoDB Local only (moto's
in-process stub applies every request whatever the fault answers); the retries of one
commit rely on the engine honouring its ``ClientRequestToken``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.conf import settings

from dashboard.lib.statuses import INTAKE as STATUS
from reconciliation import clock
from reconciliation.cases.vocabulary import CaseState, CaseType
from reconciliation.casework.sweeps import sweep_all
from reconciliation.dynamo.client import dynamodb_client
from reconciliation.simulation import faults
from reconciliation.stores import every_store, home_store
from tests.conftest import pledge_body
from tests.fault_helpers import plan_everywhere
from tests.helpers import audit_events, cases, claims, ledger_total, nothing_written, pledges

pytestmark = [pytest.mark.dynamodb_local_only, pytest.mark.token_semantics]


def _plan(settings, **probabilities: float) -> None:
    """Every client of the process injects these faults, as in a faulty server."""
    plan_everywhere(settings, probabilities)


def _json(response) -> dict:
    """The body as JSON: every answer of the API is JSON, never Django's HTML page."""
    assert response["Content-Type"].startswith("application/json"), (
        response.status_code,
        response.content[:300],
    )
    return response.json()


def _recorded_once(ddb, key: str) -> None:
    """Exactly one pledge for ``key``, one receipt, and the ledger counts it once."""
    assert [p["intent_id"] for p in pledges(ddb)] == [f"acme#{key}"]
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert [e["seq"] for e in audit_events(ddb, f"PLEDGE#acme#{key}")] == [1]


def _nothing_recorded(ddb) -> None:
    assert pledges(ddb) == []
    assert ledger_total(ddb) == (Decimal("0"), 0)
    assert audit_events(ddb, "PLEDGE#") == []


def _sweep_after_lease(ddb, key: str):
    """With the faults gone and the lease run out, the stuck-claim sweep must find the
    claim in the pending index and open a case for it."""
    faults.set_plan(None)
    with clock.travel(settings.CLAIM_PENDING_TTL_S + 1):
        report = sweep_all(every_store(), home=home_store, grace_s=0)
    mine = [c for c in cases(ddb) if c["intent_id"] == f"acme#{key}"]
    assert len(mine) == 1, (report.lines(), mine)
    assert mine[0]["case_id"] in report.opened, report.lines()
    [claim] = claims(ddb)
    assert claim.get("case_id") == mine[0]["case_id"]
    return mine[0]


# --- The commit applied; every answer afterwards says otherwise -------------------------


@pytest.mark.parametrize("fault", ["internal_error_after_commit", "ambiguous_then_throttle"])
def test_commit_applied_then_every_answer_fails_is_202_outcome_unknown(ddb, api, fault, settings):
    """The commit applied, then the engine answered 500 (or lost the answer and then
    throttled) to it and to every retry under its token. An attempt may have applied, so
    the client must get 202 outcome_unknown with the case id of an open AMBIGUOUS_TIMEOUT
    case, never a definite failure (503 throttled); the pledge is recorded exactly once."""
    _plan(settings, **{fault: 1.0})
    response = api.post("cf-1", pledge_body())
    faults.set_plan(None)
    body = _json(response)
    assert (response.status_code, body["error"]) == (202, "outcome_unknown"), body
    assert response["Location"] == "/api/v1/pledges/cf-1"
    assert body.get("case_id"), body
    [case] = [c for c in cases(ddb) if c["case_id"] == body["case_id"]]
    assert case["case_type"] == CaseType.AMBIGUOUS_TIMEOUT
    assert case["intent_id"] == "acme#cf-1"
    assert case["state"] != CaseState.RESOLVED
    _recorded_once(ddb, "cf-1")
    # The recovery path answers from the durable record; a retry writes nothing twice.
    recovered = api.get("cf-1")
    assert recovered.status_code == 200 and recovered.json()["amount"] == "25.00"
    assert api.post("cf-1", pledge_body()).status_code in (200, 201)
    _recorded_once(ddb, "cf-1")


# --- A definite failure whose case cannot be written ------------------------------------


def test_conflict_with_case_writes_failing_is_409_and_leaves_the_claim_to_the_sweep(
    ddb, api, settings
):
    """Every commit is cancelled by TransactionConflict and the CANCELLED_TRANSACTION case
    cannot be written: the client gets a definite 409 and nothing is recorded, and the
    claim must not leave the pending index without its case (docs/design.md §3): it stays
    PENDING with its pending_shard, and the sweep, once the lease has passed, opens a case
    for it."""
    _plan(settings, transaction_conflict=1.0, case_write_fails=1.0)
    response = api.post("cf-2", pledge_body())
    faults.set_plan(None)
    body = _json(response)
    assert response.status_code == 409, body
    assert body["error"] in {k for k, v in STATUS.items() if v == 409}, body
    _nothing_recorded(ddb)
    assert cases(ddb) == []
    [claim] = claims(ddb)
    assert claim["status"] == "PENDING", claim
    assert claim.get("pending_shard", "").startswith("P#"), claim
    _sweep_after_lease(ddb, "cf-2")


# --- DynamoDB refuses the call itself ---------------------------------------------------


@contextlib.contextmanager
def refuse_pledge_commit(error_type: str, message: str) -> Iterator[list[str]]:
    """Answer the pledge commit alone (a TransactWriteItems with a Put on the pledges
    table) with HTTP 400 ``error_type``; every other call goes through. Yields the tokens
    of the refused sends."""
    client = dynamodb_client()
    refused: list[str] = []

    def handler(request, **_kwargs):
        payload = json.loads(request.body or b"{}")
        items = payload.get("TransactItems", [])
        if not any("Put" in i and i["Put"].get("TableName", "").endswith("pledges") for i in items):
            return None
        refused.append(payload.get("ClientRequestToken", ""))
        return faults.error_response(request, 400, error_type, message)

    event = "before-send.dynamodb.TransactWriteItems"
    client.meta.events.register_first(event, handler)
    try:
        yield refused
    finally:
        client.meta.events.unregister(event, handler)


REFUSALS = [
    ("com.amazon.coral.service#AccessDeniedException", "not authorized (test)"),
    ("com.amazon.coral.validate#ValidationException", "One or more parameter values (test)"),
]


@pytest.mark.parametrize("error_type,message", REFUSALS, ids=["access_denied", "validation"])
def test_commit_refused_is_json_5xx_and_leaves_the_claim_to_the_sweep(
    ddb, api, error_type, message
):
    """DynamoDB refuses the commit itself (AccessDenied, Validation): the answer is JSON
    with a documented error code and status 503 or 500, never Django's HTML 500; nothing
    is recorded, and the claim stays PENDING in the pending index, where the sweep finds
    it."""
    api.client.raise_request_exception = False
    with refuse_pledge_commit(error_type, message) as refused:
        response = api.post("cf-3", pledge_body())
    assert refused, "the commit was never sent"
    assert response.status_code in (500, 503), (response.status_code, response.content[:300])
    body = _json(response)
    documented = {k for k, v in STATUS.items() if v == response.status_code}
    assert body["error"] in documented, body
    _nothing_recorded(ddb)
    [claim] = claims(ddb)
    assert claim["status"] == "PENDING", claim
    assert claim.get("pending_shard", "").startswith("P#"), claim
    _sweep_after_lease(ddb, "cf-3")


def test_access_denied_on_every_call_is_503_dynamodb_unavailable(ddb, api, settings):
    """Every call answered AccessDeniedException: JSON 503 dynamodb_unavailable with
    Retry-After, and nothing written anywhere."""
    api.client.raise_request_exception = False
    _plan(settings, access_denied=1.0)
    response = api.post("cf-4", pledge_body())
    faults.set_plan(None)
    body = _json(response)
    assert (response.status_code, body["error"]) == (503, "dynamodb_unavailable"), body
    assert int(response["Retry-After"]) >= 1
    assert nothing_written(ddb)
