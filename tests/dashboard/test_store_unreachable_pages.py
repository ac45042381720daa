"""Staff pages while DynamoDB is unreachable: a clear 503 page that says the case store
cannot be reached and when to try again, never the generic 500, which tells staff
neither what failed nor whether retrying will help."""

from __future__ import annotations

import pytest
from django.test import Client

from reconciliation.dynamo.client import reset_clients
from reconciliation.dynamo.local import free_port
from tests.helpers import sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

PAGES = [
    "/",
    "/queues/stuck/",
    "/queues/ambiguous/",
    "/queues/mine/",
    "/queues/resolved/",
    "/cases/?q=D-1001",
    "/cases/C-AAAAAAAAAAAAAAAA/",
    "/audit/",
    "/approvals/",
]


@pytest.fixture
def store_down(settings):
    """Every DynamoDB call goes to a loopback port nothing listens on."""
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    settings.DDB_MAX_ATTEMPTS = 1
    settings.DDB_APP_RETRY_ATTEMPTS = 1
    reset_clients()
    yield
    reset_clients()


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
@pytest.mark.parametrize("path", PAGES)
def test_staff_pages_answer_503_naming_the_case_store(store_down, path, htmx):
    """A supervisor opening each staff page gets 503 with Retry-After and a page that
    says the case store is unreachable; no 500, no stack."""
    client = Client(raise_request_exception=False)
    sign_in(client, "supervisor", username="sue")
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client.get(path, **headers)
    assert response.status_code == 503, (path, response.status_code)
    assert int(response["Retry-After"]) >= 1
    assert "The case store is unreachable" in response.content.decode()
    assert "no-store" in response["Cache-Control"]
