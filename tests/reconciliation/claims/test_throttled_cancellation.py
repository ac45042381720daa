"""A pledge commit cancelled because an item was throttled (``TransactionCanceledException``
whose reasons are ``ThrottlingError`` or ``ProvisionedThroughputExceeded`` and nothing
that says no) is throttling: retried with backoff under the same token, and past the
budget answered 503 ``throttled`` with the reason on the claim; never a conflict. Once
an attempt may have applied, the outcome rule still makes it a 202.

The cancellations answer at the HTTP layer, so these run on DynamoDB Local only (moto's
in-process stub would apply the request whatever the hook answered)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session

from reconciliation import metrics
from reconciliation.dynamo.client import dynamodb_client
from reconciliation.simulation import faults
from tests.conftest import pledge_body
from tests.fault_helpers import plan_everywhere
from tests.helpers import cases, claims, ledger_total, pledges

pytestmark = pytest.mark.dynamodb_local_only

REASONS = ["ThrottlingError", "ProvisionedThroughputExceeded"]


@contextlib.contextmanager
def throttled_commit(reason: str, *, first_lost: bool = False) -> Iterator[list[str]]:
    """Cancel every send of the pledge commit with ``reason`` on its ledger item (``None``
    on the others), as AWS does when that item is throttled; with ``first_lost`` the first
    send reaches the engine and applies, and its answer is lost. Yields the token of
    every send."""
    client = dynamodb_client()
    sends: list[str] = []
    session = URLLib3Session()

    def handler(request, **_kwargs):
        payload = json.loads(request.body or b"{}")
        items = payload.get("TransactItems", [])
        if not any("Put" in i and i["Put"].get("TableName", "").endswith("pledges") for i in items):
            return None
        sends.append(payload.get("ClientRequestToken", ""))
        if first_lost and len(sends) == 1:
            session.send(request)
            raise ConnectionClosedError(endpoint_url=request.url)
        reasons = [
            {"Code": reason, "Message": "Throughput exceeds the limit (test)"}
            if "Update" in i and i["Update"].get("TableName", "").endswith("ledger")
            else {"Code": "None"}
            for i in items
        ]
        return faults.error_response(
            request,
            400,
            "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "Transaction cancelled, please refer cancellation reasons for specific reasons",
            CancellationReasons=reasons,
        )

    event = "before-send.dynamodb.TransactWriteItems"
    client.meta.events.register_first(event, handler)
    try:
        yield sends
    finally:
        client.meta.events.unregister(event, handler)


@pytest.fixture
def quick_retries(settings):
    settings.DDB_APP_RETRY_BASE_S = 0.001
    settings.DDB_APP_RETRY_CAP_S = 0.002


@pytest.mark.parametrize("reason", REASONS)
def test_a_throttled_cancellation_past_the_budget_is_503_throttled(
    ddb, api, settings, quick_retries, reason
):
    """Every send of the commit is cancelled with a throttling reason: it is retried with
    the same token as throttling is, then answered 503 ``throttled`` with Retry-After;
    nothing is recorded, no case is opened, the claim is FAILED (its cool-off) with the
    reason as its last error, and the metrics count it as throttling."""
    outcomes = metrics.PLEDGE_OUTCOMES.labels("throttled")
    retries = metrics.APP_RETRIES.labels(reason)
    before = (outcomes._value.get(), retries._value.get())
    with throttled_commit(reason) as sends:
        response = api.post("tc-1", pledge_body())
    assert response.status_code == 503, response.content
    assert response.json()["error"] == "throttled"
    assert int(response["Retry-After"]) >= 1
    assert len(sends) == settings.DDB_APP_RETRY_ATTEMPTS and len(set(sends)) == 1
    assert pledges(ddb) == [] and ledger_total(ddb) == (Decimal("0"), 0)
    assert cases(ddb) == []
    [claim] = claims(ddb)
    assert (claim["status"], claim["last_error_code"]) == ("FAILED", reason)
    assert "pending_shard" not in claim
    assert outcomes._value.get() == before[0] + 1
    assert retries._value.get() == before[1] + settings.DDB_APP_RETRY_ATTEMPTS - 1


@pytest.mark.parametrize("reason", REASONS)
def test_a_throttled_cancellation_after_a_lost_answer_is_202(
    ddb, api, settings, quick_retries, reason
):
    """The commit's first send applies and its answer is lost; every retry under its token
    is cancelled as throttled. An attempt may have applied, so the answer is 202
    outcome_unknown with an AMBIGUOUS_TIMEOUT case naming the throttling reason, never
    503: the pledge is recorded once."""
    with throttled_commit(reason, first_lost=True) as sends:
        response = api.post("tc-2", pledge_body())
    assert response.status_code == 202, response.content
    assert response.json()["error"] == "outcome_unknown"
    assert len(set(sends)) == 1 and len(sends) > 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    [case] = cases(ddb)
    assert case["case_type"] == "AMBIGUOUS_TIMEOUT"
    assert json.loads(case["evidence"])["error_code"] == reason


def test_the_cancelled_throttled_fault_answers_as_aws_does(ddb, api, settings, quick_retries):
    """The ``cancelled_throttled`` fault cancels the pledge commit with ThrottlingError on
    its ledger item: the API answers 503 ``throttled``, and nothing is recorded."""
    plan_everywhere(settings, {"cancelled_throttled": 1.0})
    response = api.post("tc-3", pledge_body())
    plan = faults.active_plan()
    faults.set_plan(None)
    assert response.status_code == 503, response.content
    assert response.json()["error"] == "throttled"
    assert plan.counts == {"cancelled_throttled": settings.DDB_APP_RETRY_ATTEMPTS}
    assert pledges(ddb) == [] and cases(ddb) == []
    [claim] = claims(ddb)
    assert claim["last_error_code"] == "ThrottlingError"
