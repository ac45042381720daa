"""The case page (banners, decoded reasons, evidence, token window, timeline, the forms
offered) and the actions on a case: dispositions, override requests, assignment, stale
forms and double submissions; each as a full page and as an htmx fragment."""

from __future__ import annotations

import re
import uuid

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_assign, case_dispose
from tests.conftest import ENGINES
from tests.helpers import acting, audit_events, repositories, sign_in
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case

# Views only, except the decoded cancellation reasons, which differ between engines.
pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}
WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "Checked the consistent reads."}


def form(case, **fields) -> dict:
    return {"seen_version": case.version, "action_id": str(uuid.uuid4()), **WHY, **fields}


def radios(html: str, name: str) -> list[str]:
    return re.findall(rf'name="{name}" value="([A-Z_]+)"', html)


def case_events(ddb, case_id: str) -> list[str]:
    return [e["action"] for e in audit_events(ddb, f"CASE#{case_id}")]


def test_case_page_full_and_fragment(ddb, staff_client):
    """Without htmx the case page is a whole document; with htmx it is the #case
    fragment only; both vary on HX-Request."""
    case = stuck_case("cp-1")
    page = staff_client.get(f"/cases/{case.case_id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.startswith("<!doctype html>") and 'id="case"' in html
    assert "HX-Request" in page["Vary"]
    fragment = staff_client.get(f"/cases/{case.case_id}/", **HX)
    body = fragment.content.decode()
    assert fragment.status_code == 200
    assert "<html" not in body and body.lstrip().startswith('<div id="case"')
    assert "hx-swap-oob" not in body  # messages travel only with answers to actions


def test_history_restore_gets_the_whole_page(ddb, staff_client):
    """htmx asking to restore history (cache miss) gets the full page, not a fragment."""
    case = stuck_case("cp-2")
    page = staff_client.get(f"/cases/{case.case_id}/", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HX)
    assert "<!doctype html>" in page.content.decode()


def test_unknown_case_is_404(ddb, staff_client):
    """A case id that does not exist answers 404."""
    assert staff_client.get("/cases/C-NOPE/").status_code == 404
    assert staff_client.get("/cases/C-NOPE/evidence/", **HX).status_code == 404


def test_ambiguous_and_failed_transactions_cannot_be_confused(ddb, staff_client, settings):
    """A commit whose answer was lost (202, may have committed) and a transaction that
    failed (nothing of it written) get different, plainly worded banners; never both. Each
    says what the live evidence finds now (test_case_page_truth.py). The lost answer's
    banner never says "acknowledgement": that word is the webhooks' now, and a lost
    answer read as a failed webhook."""
    settings.AUTO_RESOLVE_COMMITTED = False
    ambiguous = ambiguous_case("cp-3")
    cancelled = key_reuse_case(ddb, "cp-4")
    stuck = stuck_case("cp-5")
    ack = staff_client.get(f"/cases/{ambiguous.case_id}/").content.decode()
    assert "Answer lost" in ack and "The write committed: a pledge is recorded" in ack
    assert "Acknowledgement" not in ack.split('id="headline"')[1].split("</section>")[0]
    assert 'HTTP 202: <span title="error code outcome_unknown">outcome unknown</span>' in ack
    assert "Transaction failed" not in ack and "Nothing was written" not in ack
    txn = staff_client.get(f"/cases/{cancelled.case_id}/").content.decode()
    assert "Transaction failed" in txn and "this transaction wrote nothing" in txn
    assert 'HTTP 422: <span title="error code idempotency_key_reused">key reused</span>' in txn
    assert "Answer lost" not in txn and "may have committed" not in txn
    stuck_page = staff_client.get(f"/cases/{stuck.case_id}/").content.decode()
    assert "No outcome recorded" in stuck_page
    assert "Answer lost" not in stuck_page and "Transaction failed" not in stuck_page


@pytest.mark.engines(*ENGINES)  # the engine's CancellationReasons and ALL_OLD items
def test_decoded_reasons_one_row_per_item_with_old_item_beside_attempt(ddb, staff_client):
    """The cancelled transaction's reasons are a table: one item per transaction item,
    with operation, table, key, code, meaning, and the returned old item beside the
    attempted write, differing attributes marked."""
    case = key_reuse_case(ddb, "cp-6")
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    items = re.findall(r'<tbody class="decoded-item( failed)?">', html)
    assert len(items) == len(case.decoded) == 5
    assert [bool(f) for f in items] == [r.failed for r in case.decoded]
    assert "ConditionalCheckFailed" in html
    assert "The pledge for this intent already exists" in html
    assert "intent_id = <code>acme#cp-6</code>" in html
    compare = html[
        html.index('<table class="compare">') : html.index(
            "</table>", html.index('<table class="compare">')
        )
    ]
    amount_row = re.search(
        r'<tr class="differs">\s*<th scope="row" class="mono">amount.*?</tr>', compare, re.S
    )
    assert amount_row and "25" in amount_row.group(0) and "99" in amount_row.group(0)
    assert "ADD pledged_total" in html  # the ledger update expression as attempted


def test_no_decoded_reasons_for_a_lost_acknowledgement(ddb, staff_client, settings):
    """An ambiguous timeout has no cancellation reasons, and the page says why."""
    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("cp-7")
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    assert "Its answer was lost, so DynamoDB sent no reasons." in html
    assert 'class="decoded-item' not in html


def test_evidence_panel_refresh(ddb, staff_client, settings, monkeypatch):
    """The evidence refresh answers htmx with the #evidence panel (consistent reads and
    the time read; not the timeline, which the panel does not show) and plain browsers
    with the whole case page."""
    from dashboard.staff.views import cases as case_views

    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("cp-8")
    with monkeypatch.context() as no_timeline:
        no_timeline.setattr(case_views, "case_timeline", lambda *a: pytest.fail("timeline read"))
        fragment = staff_client.get(f"/cases/{case.case_id}/evidence/", **HX)
    body = fragment.content.decode()
    assert fragment.status_code == 200
    assert body.lstrip().startswith('<section id="evidence"')
    assert "Read at" in body and "is recorded</strong> for this intent" in body
    assert "Completed" in body and "The claim moved on since the case opened" in body
    assert 'id="case"' not in body
    page = staff_client.get(f"/cases/{case.case_id}/evidence/").content.decode()
    assert "<!doctype html>" in page and 'id="evidence"' in page


def test_token_window_inside_then_outside(ddb, staff_client):
    """Inside 10 minutes an identical retry is recognised by the token; after, the page
    says the token no longer counts and the durable key keeps a retry safe."""
    case = key_reuse_case(ddb, "cp-9")
    inside = staff_client.get(f"/cases/{case.case_id}/evidence/", **HX).content.decode()
    assert "Inside the 10 min window" in inside
    with clock.travel(11 * 60):
        outside = staff_client.get(f"/cases/{case.case_id}/evidence/", **HX).content.decode()
    assert "Outside the 10 min window" in outside
    assert "Inside the" not in outside


def test_forms_offer_only_allowed_actions(ddb, staff_client):
    """The forms list exactly what policy allows for this case type, state and role, less
    what the evidence refusals refuse (no pledge: neither confirmed nor void; a pledge
    with another payload under the key: neither confirmed nor retried), and show what
    the evidence rules out disabled, with its reason."""
    stuck = stuck_case("cp-10")
    cancelled = key_reuse_case(ddb, "cp-11")
    html = staff_client.get(f"/cases/{stuck.case_id}/").content.decode()
    assert radios(html, "disposition") == ["RETRY_COMMIT", "ESCALATE"]
    assert radios(html, "override") == ["RELEASE_CLAIM"]
    html = staff_client.get(f"/cases/{cancelled.case_id}/").content.decode()
    assert radios(html, "disposition") == ["DUPLICATE_REJECTED_OK", "ESCALATE"]
    assert "Not possible: The pledge recorded under this key has a different payload" in html
    case_dispose(disposition="ESCALATE", **acting().on(stuck, action_id="esc", **WHY))
    html = staff_client.get(f"/cases/{stuck.case_id}/").content.decode()
    assert radios(html, "disposition") == ["RETRY_COMMIT"]
    assert 'name="seen_version" value="2"' in html
    assert "required" in html and 'minlength="10"' in html


def test_auditor_sees_no_action_forms(ddb, auditor_client):
    """Auditors read the case, evidence and timeline, and are offered no form at all."""
    case = stuck_case("cp-12")
    html = auditor_client.get(f"/cases/{case.case_id}/").content.decode()
    assert "read-only access" in html
    assert '<form method="post" action="/cases/' not in html
    assert "Assign to me" not in html
    assert "Audit timeline" in html and "Case opened" in html


def test_resolved_case_offers_reopen_only(ddb, staff_client):
    """A resolved case offers the REOPEN override request and nothing else."""
    case = key_reuse_case(ddb, "cp-13")
    case_dispose(disposition="DUPLICATE_REJECTED_OK", **acting().on(case, action_id="dup", **WHY))
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    assert radios(html, "disposition") == []
    assert radios(html, "override") == ["REOPEN"]
    assert "Assign to me" not in html


def test_disposition_by_htmx_swaps_case_and_messages(ddb, staff_client):
    """An htmx disposition answers 200 with the fresh #case and the message as an
    out-of-band swap of #messages; the case and its audit trail record it."""
    case = stuck_case("cp-14")
    response = staff_client.post(
        f"/cases/{case.case_id}/dispose/", form(case, disposition="ESCALATE"), **HX
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="case"')
    oob = body[body.index('<div id="messages"') :]
    assert 'hx-swap-oob="true"' in oob and "Escalated." in oob
    assert "ESCALATED" in body and "Checked the consistent reads." in body
    assert repositories().cases.get(case.case_id).state == "ESCALATED"
    assert case_events(ddb, case.case_id) == ["case_opened", "case_escalated"]


def test_disposition_without_htmx_redirects_with_message(ddb, staff_client):
    """A plain form post redirects to the case page (post/redirect/get), which shows the
    message."""
    case = stuck_case("cp-15")
    response = staff_client.post(
        f"/cases/{case.case_id}/dispose/", form(case, disposition="RETRY_COMMIT")
    )
    assert response.status_code == 302 and response["Location"] == f"/cases/{case.case_id}/"
    page = staff_client.get(response["Location"]).content.decode()
    assert "The commit will be retried in the background with the same token." in page
    assert "Commit retry requested" in page


def test_stale_form_is_refused_with_who_and_when(ddb, staff_client):
    """Someone else changed the case since the form was rendered: 409, "changed by X at
    T", the fresh state and a form at the fresh version; nothing applied."""
    case = stuck_case("cp-16")
    case_assign(**acting("bob").on(case, seen_version=1, action_id="b"))
    stale = form(case, disposition="ESCALATE")
    response = staff_client.post(f"/cases/{case.case_id}/dispose/", stale, **HX)
    body = response.content.decode()
    assert response.status_code == 409
    assert "Someone else acted first" in body
    assert re.search(
        r"changed by <strong>bob</strong> at\s*<strong><time datetime=\"\d{4}-\d\d-\d\d", body
    )
    assert 'name="seen_version" value="2"' in body
    assert stale["action_id"] not in body  # a fresh action id for the next try
    assert "Not applied: the case was changed by bob" in body  # the out-of-band message
    assert re.search(r'value="ESCALATE"[^>]*checked', body)  # the choice is kept
    assert repositories().cases.get(case.case_id).state == "OPEN"
    assert case_events(ddb, case.case_id) == ["case_opened", "case_assigned"]
    full = staff_client.post(f"/cases/{case.case_id}/dispose/", form(case, disposition="ESCALATE"))
    assert full.status_code == 409 and "<!doctype html>" in full.content.decode()
    assert "Someone else acted first" in full.content.decode()


def test_double_submit_applies_once(ddb, staff_client):
    """The same form posted twice (same action id) applies once; the second answer says
    nothing changed."""
    case = stuck_case("cp-17")
    data = form(case, disposition="ESCALATE")
    first = staff_client.post(f"/cases/{case.case_id}/dispose/", data, **HX)
    second = staff_client.post(f"/cases/{case.case_id}/dispose/", data, **HX)
    assert first.status_code == second.status_code == 200
    assert "already applied; nothing changed" in second.content.decode()
    assert case_events(ddb, case.case_id) == ["case_opened", "case_escalated"]


def test_missing_reason_is_400_and_changes_nothing(ddb, staff_client):
    """No reason code and a too-short text: 400, field errors, the case untouched."""
    case = stuck_case("cp-18")
    data = form(case, disposition="ESCALATE", reason_code="", reason_text="short")
    response = staff_client.post(f"/cases/{case.case_id}/dispose/", data, **HX)
    body = response.content.decode()
    assert response.status_code == 400
    assert "This field is required." in body
    assert "at least 10 characters" in body
    assert case_events(ddb, case.case_id) == ["case_opened"]


def test_unavailable_disposition_is_422(ddb, staff_client):
    """A disposition policy does not allow for this case type is refused (422) with the
    service's reason; the form is shown again."""
    case = stuck_case("cp-19")
    response = staff_client.post(
        f"/cases/{case.case_id}/dispose/", form(case, disposition="DUPLICATE_REJECTED_OK"), **HX
    )
    assert response.status_code == 422
    assert "is not available for a stuck claim case" in response.content.decode()
    assert case_events(ddb, case.case_id) == ["case_opened"]


def test_assign_to_me_and_unassign(ddb, client):
    """ "Assign to me" records the assignee; the page then offers "Unassign me"."""
    case = stuck_case("cp-20")
    sign_in(client, username="ada")
    response = client.post(
        f"/cases/{case.case_id}/assign/",
        {"seen_version": 1, "action_id": str(uuid.uuid4())},
        **HX,
    )
    body = response.content.decode()
    assert response.status_code == 200 and "Assigned to you." in body
    assert "Unassign me" in body and "(you)" in body
    assert repositories().cases.get(case.case_id).assignee == "ada"
    response = client.post(
        f"/cases/{case.case_id}/assign/",
        {"seen_version": 2, "action_id": str(uuid.uuid4()), "unassign": "on"},
    )
    assert response.status_code == 302
    assert repositories().cases.get(case.case_id).assignee is None


def test_override_request_moves_case_to_approval(ddb, staff_client):
    """Requesting RELEASE_CLAIM puts the case in OVERRIDE_REQUESTED; the page then says
    a different supervisor must decide and offers no further action."""
    case = stuck_case("cp-21")
    response = staff_client.post(
        f"/cases/{case.case_id}/override/",
        form(case, override="RELEASE_CLAIM", reason_code="CLIENT_CONFIRMED"),
        **HX,
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "requested; a supervisor must approve" in body
    assert "A supervisor other than the requester must approve" in body
    assert radios(body, "disposition") == [] and radios(body, "override") == []
    assert repositories().cases.get(case.case_id).state == "OVERRIDE_REQUESTED"


def test_timeline_lists_the_case_events_in_order(ddb, auditor_client):
    """The audit timeline shows each event of the case stream, oldest first, with the
    actor, the state change and the reason."""
    case = stuck_case("cp-22")
    case_dispose(
        disposition="ESCALATE",
        **acting("bob").on(
            case,
            seen_version=1,
            reason_code="NEEDS_REVIEW",
            reason_text="A second opinion, please.",
            action_id="e",
        ),
    )
    html = auditor_client.get(f"/cases/{case.case_id}/").content.decode()
    timeline = html[html.index('<ol class="timeline">') :]
    assert timeline.index("Case opened") < timeline.index("Escalated")
    assert "Open → Escalated" in timeline
    assert "Needs a second opinion: “A second opinion, please.”" in timeline
    assert "by bob (finance staff)" in timeline


def test_case_page_shows_chain_status_and_a_broken_link(ddb, client):
    """The case page states that its audit chain verifies, and names the broken seq once
    a stored event is edited directly in DynamoDB."""
    case = stuck_case("chain-view-1")
    sign_in(client, "auditor", "aud")
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert "Hash chain intact" in page and "1 event recomputed" in page
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": f"CASE#{case.case_id}"}, "seq": {"N": "1"}},
        UpdateExpression="SET #a = :x",
        ExpressionAttributeNames={"#a": "action"},
        ExpressionAttributeValues={":x": {"S": "case_closed_quietly"}},
    )
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert "Hash chain broken" in page and "at seq 1" in page


def test_reason_of_invisible_characters_is_400_and_changes_nothing(ddb, staff_client):
    """Ten zero-width spaces and a bidi control as the reason: 400 with the reason's
    field error, the case untouched."""
    case = stuck_case("cp-invisible")
    data = form(case, disposition="ESCALATE", reason_text="\u200b" * 10 + "\u202e")
    response = staff_client.post(f"/cases/{case.case_id}/dispose/", data, **HX)
    assert response.status_code == 400
    assert "at least 10 characters" in response.content.decode()
    assert case_events(ddb, case.case_id) == ["case_opened"]
