"""The approvals page: pending override requests with requester, reason, age and expiry;
approve or reject with a note; a supervisor's own requests are shown but cannot be
decided by them; stale and expired requests are refused."""

from __future__ import annotations

import uuid

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_assign
from reconciliation.casework.overrides import override_request
from tests import helpers
from tests.helpers import acting, repositories
from tests.reconciliation.factories import stuck_case

# Views only: the services' engine semantics are tested on both engines in tests/reconciliation.
pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}
NOTE = {"reason_code": "CLIENT_CONFIRMED", "reason_text": "Checked with the client first."}


def requested(key: str, by: str = "ada", role: str = "finance_staff"):
    """A stuck case with a RELEASE_CLAIM request pending, raised by ``by``."""
    case = stuck_case(key)
    result = override_request(
        override="RELEASE_CLAIM",
        **acting(by, role).on(
            case,
            reason_code="CLIENT_CONFIRMED",
            reason_text="The client wants to retry.",
            action_id=f"req-{key}",
        ),
    )
    return result.case


def decision(case, **extra) -> dict:
    return {
        "request_id": case.override.request_id,
        "action_id": str(uuid.uuid4()),
        **NOTE,
        **extra,
    }


def test_approvals_page_lists_pending_requests(ddb, supervisor_client):
    """Each pending request shows the action, requester, reason, age, expiry and a
    decision form; htmx gets the #requests fragment."""
    case = requested("ap-1")
    page = supervisor_client.get("/approvals/")
    html = page.content.decode()
    assert page.status_code == 200 and "<!doctype html>" in html
    assert f'id="req-{case.case_id}"' in html
    assert "Release the claim (client may retry)" in html
    assert 'ada <span class="muted">· Finance staff · ada@example.org' in html
    assert "The client confirmed the intended outcome: “The client wants to retry.”" in html
    assert "ago)" in html and "(in 23 h" in html
    assert f'formaction="/cases/{case.case_id}/approve/"' in html
    assert f'hx-post="/cases/{case.case_id}/reject/"' in html
    fragment = supervisor_client.get("/approvals/", **HX).content.decode()
    assert fragment.lstrip().startswith('<section id="requests"') and "<html" not in fragment


def test_empty_approvals_page(ddb, supervisor_client):
    """With nothing pending the page says so."""
    assert (
        "No override requests are waiting." in supervisor_client.get("/approvals/").content.decode()
    )


def test_own_request_is_shown_but_not_decidable(ddb, client):
    """A supervisor's own request is listed without a decision form, and approving or
    rejecting it anyway is refused (403) by the service, with the reason."""
    case = requested("ap-2", by="sue", role="supervisor")
    helpers.sign_in(client, "supervisor", "sue")
    html = client.get("/approvals/").content.decode()
    assert "You asked for this override: another supervisor must decide it." in html
    assert f'formaction="/cases/{case.case_id}/approve/"' not in html
    for decide in ("approve", "reject"):
        response = client.post(f"/cases/{case.case_id}/{decide}/", decision(case), **HX)
        assert response.status_code == 403, decide
        assert "a different supervisor must decide it" in response.content.decode()
    assert repositories().cases.get(case.case_id).state == "OVERRIDE_REQUESTED"


def test_approve_by_htmx_replaces_the_request_card(ddb, supervisor_client):
    """Approving answers the request's card with the outcome and the message out of
    band; the case is resolved and the claim released (FAILED)."""
    case = requested("ap-3")
    response = supervisor_client.post(f"/cases/{case.case_id}/approve/", decision(case), **HX)
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith(f'<article class="card request" id="req-{case.case_id}"')
    assert "Approved: the claim is released; the client may retry." in body
    assert 'hx-swap-oob="true"' in body
    assert repositories().cases.get(case.case_id).state == "RESOLVED"
    assert repositories().claims.get(case.claim_pk).status == "FAILED"


def test_reject_without_htmx_redirects(ddb, supervisor_client):
    """Rejecting with a plain form post redirects back to the approvals page with the
    message; the case returns to OPEN."""
    case = requested("ap-4")
    response = supervisor_client.post(f"/cases/{case.case_id}/reject/", decision(case))
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    page = supervisor_client.get("/approvals/").content.decode()
    assert "Rejected: the case is back where it was." in page
    assert repositories().cases.get(case.case_id).state == "OPEN"


def test_decision_needs_a_note(ddb, supervisor_client):
    """No note: 400 with the field errors, as a page and as the request card."""
    case = requested("ap-5")
    card = supervisor_client.post(
        f"/cases/{case.case_id}/approve/", decision(case, reason_text="ok"), **HX
    )
    assert card.status_code == 400
    assert "at least 10 characters" in card.content.decode()
    page = supervisor_client.post(f"/cases/{case.case_id}/approve/", decision(case, reason_code=""))
    assert page.status_code == 400 and "<!doctype html>" in page.content.decode()
    assert "This field is required." in page.content.decode()
    assert repositories().cases.get(case.case_id).state == "OVERRIDE_REQUESTED"


def test_request_pinned_to_its_version(ddb, supervisor_client):
    """The case's evidence changed after the request was raised: approval is refused
    (422) with who changed it."""
    from tests.reconciliation.casework.test_dispositions import material_change

    case = requested("ap-6")
    material_change(case.case_id)
    response = supervisor_client.post(f"/cases/{case.case_id}/approve/", decision(case), **HX)
    assert response.status_code == 422
    assert "The case changed since the request (by system" in response.content.decode()
    assert repositories().cases.get(case.case_id).state == "OVERRIDE_REQUESTED"


def test_assignment_after_the_request_does_not_block_approval(ddb, supervisor_client):
    """Someone assigns the case to themselves after the request: the supervisor's
    approval still applies."""
    case = requested("ap-6b")
    case_assign(**acting("bob").on(case, action_id="x"))
    response = supervisor_client.post(f"/cases/{case.case_id}/approve/", decision(case), **HX)
    assert response.status_code == 200
    assert "Approved: the claim is released" in response.content.decode()
    assert repositories().cases.get(case.case_id).state == "RESOLVED"


def test_expired_request(ddb, supervisor_client):
    """Past its expiry the page says it expired, and approving is refused."""
    case = requested("ap-7")
    with clock.travel(25 * 3600):
        html = supervisor_client.get("/approvals/").content.decode()
        assert "(expired 1 h" in html
        response = supervisor_client.post(f"/cases/{case.case_id}/approve/", decision(case), **HX)
    assert response.status_code == 422
    assert "The request has expired" in response.content.decode()


def test_decided_elsewhere(ddb, client):
    """A request another supervisor already decided: the card says it is no longer
    pending instead of offering the form again."""
    case = requested("ap-8")
    helpers.sign_in(client, "supervisor", "sam")
    client.post(f"/cases/{case.case_id}/reject/", decision(case))
    response = client.post(f"/cases/{case.case_id}/approve/", decision(case), **HX)
    body = response.content.decode()
    assert response.status_code == 422
    assert "There is no pending request on this case" in body
    assert "No longer pending: the case is open" in body


def _card(html: str, case_id: str) -> str:
    """The request card of ``case_id`` in an approvals page."""
    start = html.index(f'<article class="card request" id="req-{case_id}"')
    return html[start : html.index("</article>", start)]


def test_request_cards_show_the_evidence_a_decision_needs(ddb, supervisor_client):
    """Each card says whether a pledge is recorded for the intent (and which), where the
    claim stands, the amount, fund and currency, and who asked and why: a supervisor
    decides without opening the case."""
    from tests.reconciliation.factories import ambiguous_case, void_requested

    release = requested("ap-ev-1")
    void = void_requested(ambiguous_case("ap-ev-2")).case
    html = supervisor_client.get("/approvals/").content.decode()

    none = _card(html, release.case_id)
    assert "<dt>Pledge</dt><dd><strong>None</strong>" in none
    assert "No pledge is recorded for this intent." in none
    assert '<dt>Claim</dt><dd><span class="badge" title=' in none
    assert ">Pending</span>" in none
    assert "25.00 USD" in none and "to GENERAL" in none
    assert "ada" in none and "The client wants to retry." in none

    recorded = _card(html, void.case_id)
    assert ">Recorded</span>" in recorded
    assert "The pledge is recorded with this request&#x27;s payload." in recorded
    assert ">Completed</span>" in recorded
    assert "Donor withdrew the pledge by phone." in recorded


def test_a_refused_decision_shows_the_card_with_its_evidence(ddb, supervisor_client):
    """A decision refused for its note answers the card again, the evidence on it."""
    case = requested("ap-ev-3")
    card = supervisor_client.post(
        f"/cases/{case.case_id}/approve/", decision(case, reason_text="ok"), **HX
    )
    assert card.status_code == 400
    assert "No pledge is recorded for this intent." in card.content.decode()
