""" "Record and open the next case": after a disposition the button records it
and opens the next open case of the same queue, skipping the case just handled and any
case someone else has taken; with none left, the queue page says so."""

from __future__ import annotations

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_assign
from tests.helpers import acting, repositories, sign_in
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "Needs a second look by the team."}


def _escalate(case, **extra) -> dict:
    return {
        "disposition": "ESCALATE",
        "seen_version": case.version,
        "action_id": f"d-{case.case_id}",
        **WHY,
        **extra,
    }


def test_records_then_opens_the_next_case_nobody_else_has(ddb, client):
    """Three stuck cases, oldest first; the second taken by bob: escalating the first
    with the button records it and opens the third (htmx: by HX-Redirect); escalating
    the third then finds none left and goes back to the queue with a word."""
    with clock.travel(-3 * 3600):
        first = stuck_case("nx-1")
    with clock.travel(-2 * 3600):
        taken = stuck_case("nx-2")
    third = stuck_case("nx-3")
    case_assign(**acting("bob").on(taken))
    sign_in(client, "finance_staff", username="ann")
    page = client.get(f"/cases/{first.case_id}/").content.decode()
    assert 'name="then_next" value="STUCK_PENDING"' in page
    response = client.post(
        f"/cases/{first.case_id}/dispose/",
        _escalate(first, then_next="STUCK_PENDING"),
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 204
    assert response["HX-Redirect"] == f"/cases/{third.case_id}/"
    assert repositories().cases.get(first.case_id).state == "ESCALATED"
    response = client.post(
        f"/cases/{third.case_id}/dispose/", _escalate(third, then_next="STUCK_PENDING")
    )
    assert response.status_code == 302 and response["Location"] == "/queues/stuck/"
    assert "No other open case in this queue." in client.get("/queues/stuck/").content.decode()


def test_a_refused_disposition_opens_nothing(ddb, client):
    """Without a reason nothing is recorded: the case page comes back with the error
    (400), not the next case."""
    case = stuck_case("nx-bad")
    stuck_case("nx-other")
    sign_in(client, "finance_staff", username="ann")
    form = {**_escalate(case, then_next="STUCK_PENDING"), "reason_text": ""}
    response = client.post(f"/cases/{case.case_id}/dispose/", form)
    assert response.status_code == 400
    assert repositories().cases.get(case.case_id).version == case.version


@pytest.mark.parametrize("htmx", [True, False])
def test_the_next_case_says_which_case_was_just_decided(ddb, client, htmx):
    """After "Record and open the next case" the next case's page names the case just
    decided (its intent, linking back to it), the disposition and reason recorded, and
    the outcome; the message is said once, there."""
    with clock.travel(-3600):
        first = stuck_case("nx-said-1")
    second = stuck_case("nx-said-2")
    sign_in(client, "finance_staff", username="ann")
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client.post(
        f"/cases/{first.case_id}/dispose/", _escalate(first, then_next="STUCK_PENDING"), **headers
    )
    url = response["HX-Redirect"] if htmx else response["Location"]
    assert url == f"/cases/{second.case_id}/"
    page = client.get(url).content.decode()
    assert (
        f'Just decided: <a href="/cases/{first.case_id}/"><span class="intent">'
        '<span class="tenant">acme</span> <code>nx-said-1</code></span></a>'
        " — Escalate (Needs a second opinion: “Needs a second look by the team.”). Escalated."
    ) in page
    assert page.count("Escalated.</div>") == 1
