"""Every answer of the intake API says ``Cache-Control: no-store``:
a pledge, a replay, a refusal, a 401, a 404, a 405 and a 503 carry donor references or
say what the store holds right now, so no browser, proxy or CDN may keep one."""

from __future__ import annotations

import pytest

from reconciliation.dynamo.client import reset_clients
from reconciliation.dynamo.local import free_port
from tests.conftest import pledge_body

pytestmark = pytest.mark.engines("moto")  # HTTP headers: no engine semantics


def _no_store(response) -> bool:
    directives = {d.strip() for d in response.get("Cache-Control", "").split(",")}
    return "no-store" in directives


def test_every_intake_answer_is_no_store(ddb, api):
    """201, 200 (replay and GET), 400, 422, 401, 404 and 405 all say no-store."""
    created = api.post("ns-1", pledge_body())
    replay = api.post("ns-1", pledge_body())
    read = api.get("ns-1")
    invalid = api.post("ns-2", pledge_body(amount="-1"))
    reused = api.post("ns-1", pledge_body(amount="26.00"))
    missing = api.get("ns-unknown")
    no_route = api.client.get("/api/v1/nothing-here", HTTP_AUTHORIZATION=f"Bearer {api.token}")
    wrong_method = api.client.delete("/api/v1/pledges", HTTP_AUTHORIZATION=f"Bearer {api.token}")
    api.token = "plg_wrong"
    unauthorized = api.post("ns-3", pledge_body())
    answers = {
        201: created,
        200: replay,
        2000: read,
        400: invalid,
        422: reused,
        404: missing,
        4040: no_route,
        405: wrong_method,
        401: unauthorized,
    }
    for expected, response in answers.items():
        assert response.status_code == int(str(expected)[:3]), (expected, response.status_code)
        assert _no_store(response), (expected, response.get("Cache-Control"))


def test_a_503_while_dynamodb_is_unreachable_is_no_store(db, api, settings):
    """The 503 of an unreachable store (POST and the recovery GET) says no-store."""
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    settings.DDB_MAX_ATTEMPTS = 1
    reset_clients()
    try:
        posted = api.post("ns-down", pledge_body())
        read = api.get("ns-down")
    finally:
        reset_clients()
    assert posted.status_code == 503 and _no_store(posted)
    assert read.status_code == 503 and _no_store(read)
