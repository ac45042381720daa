"""The Drill page: supervisors see the last run and start one; others are refused."""

from __future__ import annotations

import pytest

from tests.helpers import sign_in


@pytest.mark.engines("dynamodb_local")
@pytest.mark.django_db
def test_supervisor_runs_the_drill_and_sees_its_table(ddb, supervisor_client, celery_results_kept):
    """POST starts the drill (inline in tests); the page then shows every scenario passed,
    and no longer that it is running (a notice outside the polled report said so after
    the result was in)."""
    page = supervisor_client.get("/drill/")
    assert page.status_code == 200 and b"No drill has run yet" in page.content
    started = supervisor_client.post("/drill/run")
    assert started.status_code == 302
    page = supervisor_client.get("/drill/")
    body = page.content.decode()
    assert "1 first commit" in body and "every audit chain verifies" in body
    assert "FAIL" not in body and "passed" in body
    # Its result shown, nothing on the page says it is still running.
    assert "running" not in body.lower()
    partial = supervisor_client.get(
        "/drill/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="drill-report"
    )
    assert b'id="drill-report"' in partial.content and b"<html" not in partial.content
    # An htmx request that is not the report's own polling gets the whole page.
    whole = supervisor_client.get("/drill/", HTTP_HX_REQUEST="true")
    assert b"<html" in whole.content and b"Run the drill now" in whole.content


@pytest.mark.engines("moto")
@pytest.mark.django_db
@pytest.mark.parametrize("role,status", [("finance_staff", 403), ("auditor", 403), (None, 403)])
def test_drill_page_is_for_supervisors_only(ddb, client, role, status):
    """Staff, auditors and users without a group get 403 for the page and the button."""
    sign_in(client, role)
    assert client.get("/drill/").status_code == status
    assert client.post("/drill/run").status_code == status


@pytest.mark.django_db
def test_drill_page_sends_anonymous_users_to_sign_in(client):
    """Anonymous: redirected to the sign-in page."""
    response = client.get("/drill/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
