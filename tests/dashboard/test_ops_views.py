"""``/healthz`` and ``/metrics``."""

from __future__ import annotations

import pytest

from reconciliation.dynamo.client import reset_clients
from reconciliation.dynamo.local import free_port

pytestmark = pytest.mark.engines("moto")  # status pages: no engine semantics


@pytest.mark.django_db(databases=[])
def test_healthz_reports_dynamodb_and_redis_ok(ddb, client):
    """With tables in place and Redis up, both dependencies report ok; the fresh tables
    hold no recorded configuration yet, which is said, not failed."""
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"dynamodb": "ok", "redis": "ok", "config": "not recorded"}


@pytest.mark.django_db(databases=[])
def test_healthz_names_what_is_down(client, settings):
    """Unreachable DynamoDB and Redis: 503 and a line for each naming the problem."""
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    reset_clients()
    response = client.get("/healthz")
    reset_clients()
    body = response.json()
    assert response.status_code == 503
    assert body == {
        "dynamodb": "error: unreachable",
        "redis": "error: unreachable",
        "config": "not checked",
    }


@pytest.mark.django_db(databases=[])
def test_healthz_never_discloses_urls_or_credentials(client, settings, caplog):
    """Unreachable Redis with a password in REDIS_URL and an unreachable DynamoDB endpoint:
    the anonymous 503 names each component and its state, never the URL, host, port or
    password; the detail goes to the server log instead."""
    dynamo_port, redis_port = free_port(), free_port()
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{dynamo_port}"
    settings.DDB_REGIONS = ""
    settings.REDIS_URL = f"redis://:S3cret-Pa55word@127.0.0.1:{redis_port}/0"
    reset_clients()
    with caplog.at_level("WARNING", logger="reconciliation.ops.health"):
        response = client.get("/healthz")
    reset_clients()
    assert response.status_code == 503
    text = response.content.decode()
    for secret in ("S3cret-Pa55word", "redis://", "http://", "127.0.0.1", str(redis_port)):
        assert secret not in text, secret
    assert str(dynamo_port) not in text
    assert set(response.json()) == {"dynamodb", "redis", "config"}
    logged = caplog.text
    assert "Redis unreachable" in logged and "DynamoDB is unreachable" in logged
    assert "S3cret-Pa55word" not in logged  # the log names the host, not the password


@pytest.mark.django_db(databases=[])
def test_metrics_are_prometheus_text(ddb, client):
    """``/metrics`` serves the text exposition format with the DynamoDB counters."""
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"dynamo_calls_total" in response.content
    assert b"dynamo_ttl_delete_before_retry_total" in response.content


@pytest.mark.django_db(databases=[])
def test_metrics_with_a_token_answer_only_its_bearer(client, settings):
    """With ``METRICS_TOKEN`` set, outcome volumes go only to the scraper that holds it:
    no header, another scheme, a wrong or a longer token each get 401 and no counters."""
    settings.METRICS_TOKEN = "scrape-7f3a"
    refused = [
        client.get("/metrics"),
        client.get("/metrics", HTTP_AUTHORIZATION="Basic scrape-7f3a"),
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-7f3b"),
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-7f3a0"),
    ]
    for response in refused:
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"dynamo_calls_total" not in response.content
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-7f3a")
    assert allowed.status_code == 200
    assert b"dynamo_calls_total" in allowed.content
