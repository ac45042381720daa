"""A fault injected into a running server (docs/design.md §11): gunicorn started with
``FAULT_INJECTION`` and ``ALLOW_FAULT_INJECTION=1``, driven over plain HTTP."""

from __future__ import annotations

from decimal import Decimal

import pytest

from reconciliation.cases.vocabulary import CaseType
from tests.conftest import pledge_body
from tests.helpers import cases, ledger_total, pledges
from tests.reliability.procs import ApiServer, django_env

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.dynamodb_local_only,
    pytest.mark.django_db(databases=[]),
]


@pytest.mark.timeout(300)
def test_server_with_internal_error_after_commit_answers_202_and_records_once(
    ddb, tmp_path, log_dir, settings
):
    """The commit applies and the engine answers 500 to it and to every retry: over HTTP
    the client gets 202 outcome_unknown with the case id of an AMBIGUOUS_TIMEOUT case, the
    pledge is recorded once, and GET finds it."""
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url="redis://127.0.0.1:1/0",  # the intake path never needs Redis
        FAULT_INJECTION="internal_error_after_commit=1",
        ALLOW_FAULT_INJECTION="1",
    )
    server = ApiServer(env, log_dir, workers=1, threads=2)
    server.prepare("acme")
    server.start()
    try:
        api = server.client()
        answer = api.post("srv-1", pledge_body())
        found = api.get("srv-1")
    finally:
        server.stop()
    log = server.process.tail(3000)
    assert (answer.status, answer.body.get("error")) == (202, "outcome_unknown"), (
        answer.body,
        log,
    )
    assert answer.body.get("case_id"), answer.body
    [case] = [c for c in cases(ddb) if c["case_id"] == answer.body["case_id"]]
    assert case["case_type"] == CaseType.AMBIGUOUS_TIMEOUT
    assert [p["intent_id"] for p in pledges(ddb)] == ["acme#srv-1"]
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert found.status == 200 and found.body["amount"] == "25.00", found.body
