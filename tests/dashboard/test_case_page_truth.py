"""The case page never contradicts itself nor goes stale: it leads with a resolution
once there is one, its banner follows the live evidence, it offers only what the
services would accept, it says so when the evidence cannot be read, it polls while a
commit retry runs in the background, and it shows the suggested next step with an
"Accept suggestion" that pre-fills (never submits) the form."""

from __future__ import annotations

import re
import uuid

import pytest
from botocore.exceptions import ClientError

from reconciliation.cases.policy import allowed_actions
from reconciliation.casework import dispositions
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.retries import retry_commit_run
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.stores import every_store, home_store
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM, acting, repositories, spend_token
from tests.reconciliation.factories import (
    ambiguous_case,
    crashed_claim,
    key_reuse_case,
    stuck_case,
)

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}
POLL = {**HX, "HTTP_HX_TARGET": "case-live"}
WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "Checked the consistent reads."}


def radios(html: str, name: str) -> list[str]:
    return re.findall(rf'name="{name}" value="([A-Z_]+)"', html)


def headline(html: str) -> str:
    """The banner the case page leads with (what is true of the case now)."""
    match = re.search(r'<section id="headline".*?</section>', html, re.S)
    assert match, "the case page has no headline banner"
    return match.group(0)


def dispose(case, disposition: str, **extra):
    return case_dispose(
        disposition=disposition,
        **acting().on(case, action_id=str(uuid.uuid4()), **{**WHY, **extra}),
    )


def queue_retry_without_running_it(monkeypatch, case):
    """RETRY_COMMIT recorded, its background task not yet run (the broker holds it)."""
    monkeypatch.setattr(dispositions, "enqueue_retry", lambda case_id, request_id=None: None)
    return dispose(case, "RETRY_COMMIT", reason_code="TRANSIENT_FAILURE").case


def test_resolved_case_leads_with_the_resolution_and_gives_no_live_advice(ddb, staff_client):
    """A stuck case resolved by its background retry: the page leads with who resolved
    it, how and when; no red "no outcome recorded" banner, no "inside the window: retry"
    advice, no suggested next step."""
    case = stuck_case("truth-resolved-1")
    dispose(case, "RETRY_COMMIT", reason_code="TRANSIENT_FAILURE")  # tasks run inline
    assert repositories().cases.get(case.case_id).state == "RESOLVED"
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    head = headline(html)
    assert "Resolved" in head and "Retry the commit" in head
    assert "by <strong>system</strong>" in head and "<time" in head
    assert "the pledge was committed" in head
    assert html.index('id="headline"') < html.index('id="summary-h"')
    assert '<a href="/queues/resolved/">Resolved</a> ›' in html  # back to where it is listed
    assert "No outcome recorded" not in html
    assert "Inside the" not in html and "Outside the" not in html
    assert 'id="suggestion"' not in html


def test_cancelled_case_banner_follows_a_recorded_pledge(ddb, staff_client, settings):
    """The key came back with another body and the durable key refused it: the pledge of
    the first request is recorded, so the banner does not say "Nothing was written"; a
    cancelled case with no pledge still does."""
    settings.AUTO_RESOLVE_COMMITTED = False
    case = key_reuse_case(ddb, "truth-cancel-1")
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    head = headline(html)
    assert "is recorded</strong> for this intent" in html  # the evidence
    assert "Nothing was written" not in html
    assert "A pledge is recorded" in head and "this transaction wrote nothing" in head
    # The pledge goes (voided by hand here): the banner follows the next read.
    repos = repositories()
    ddb.client.delete_item(TableName=ddb.tables.pledges, Key={"intent_id": {"S": case.intent_id}})
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    assert "Nothing was written" in headline(html)
    assert repos.pledges.get(case.intent_id) is None


@pytest.mark.engines("dynamodb_local")  # a token mismatch needs the engine's token rules
def test_token_mismatch_banner_follows_the_evidence(ddb, staff_client):
    """A late worker's commit met a spent token (TOKEN_MISMATCH), then the stuck case's
    retry recorded the pledge: the mismatch case's banner says the pledge is recorded,
    never "Nothing was written" beside evidence saying "A pledge is recorded"."""
    from reconciliation.casework.sweeps import sweep_all
    from reconciliation.claims import intake
    from reconciliation.clock import travel

    with travel(-200):
        crashed_claim("truth-mismatch-1")
    repos = repositories()
    claim = repos.claims.get("acme#create_pledge#truth-mismatch-1")
    [stuck_id] = sweep_all(every_store(), home=home_store).opened
    spend_token(ddb, claim.request_token)
    late = intake.pledge_commit(repos, claim)
    assert late.kind == OutcomeKind.TOKEN_PARAMETER_MISMATCH
    before = staff_client.get(f"/cases/{late.case_id}/").content.decode()
    assert "Nothing was written" in headline(before)
    with travel(11 * 60):  # past the spent token's window: the retry is a new attempt
        dispose(repos.cases.get(stuck_id), "RETRY_COMMIT", reason_code="TRANSIENT_FAILURE")
    assert repos.pledges.get(claim.intent_id) is not None
    html = staff_client.get(f"/cases/{late.case_id}/").content.decode()
    assert "is recorded</strong> for this intent" in html
    assert "Nothing was written" not in html
    assert "A pledge is recorded" in headline(html)


def test_actions_offered_follow_the_evidence(ddb, staff_client, settings):
    """No pledge: neither "Confirmed committed" nor "Void the pledge" is offered (the
    services refuse both). A committed pledge with its claim COMPLETED: "Release the
    claim" is not offered (refused: nothing to release)."""
    settings.AUTO_RESOLVE_COMMITTED = False
    stuck = stuck_case("truth-offer-1")
    committed = ambiguous_case("truth-offer-2")
    html = staff_client.get(f"/cases/{stuck.case_id}/").content.decode()
    assert radios(html, "disposition") == ["RETRY_COMMIT", "ESCALATE"]
    assert radios(html, "override") == ["RELEASE_CLAIM"]
    html = staff_client.get(f"/cases/{committed.case_id}/").content.decode()
    assert radios(html, "disposition") == ["CONFIRMED_COMMITTED", "RETRY_COMMIT", "ESCALATE"]
    assert radios(html, "override") == ["VOID_PLEDGE"]
    # What is not offered is what the server refuses, in the same words.
    refused = staff_client.post(
        f"/cases/{stuck.case_id}/dispose/",
        {
            "seen_version": stuck.version,
            "action_id": str(uuid.uuid4()),
            "disposition": "CONFIRMED_COMMITTED",
            **WHY,
        },
        **HX,
    )
    assert refused.status_code == 422
    assert "finds no pledge for this intent" in refused.content.decode()


def test_unknown_evidence_is_said_and_the_server_accepted_actions_offered(
    ddb, staff_client, monkeypatch
):
    """The consistent reads fail: the page (and the evidence fragment) says the evidence
    is unknown, offers what the server would accept (it checks again), never a 500."""
    from dashboard.staff.views import cases as case_views

    case = stuck_case("truth-unknown-1")

    def failing(*args, **kwargs):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetItem")

    monkeypatch.setattr(case_views, "case_evidence", failing)
    page = staff_client.get(f"/cases/{case.case_id}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "Evidence unknown" in html and "AccessDeniedException" in html
    assert "No pledge" not in html and "is recorded</strong>" not in html
    allowed = allowed_actions(case.case_type, case.state, staff_actor().role)
    assert radios(html, "disposition") + radios(html, "override") == allowed
    assert "could not be read" in html  # the suggestion says why it suggests nothing
    fragment = staff_client.get(f"/cases/{case.case_id}/evidence/", **HX)
    assert fragment.status_code == 200 and "Evidence unknown" in fragment.content.decode()


def test_case_page_polls_while_a_retry_runs_and_stops_when_it_ends(ddb, staff_client, monkeypatch):
    """RETRY_COMMIT queued: the page carries a poller (every 2 s) that the server re-arms
    while the retry is in flight; once the task has run, the poll answers the whole fresh
    case (retargeted to #case), resolved, with no poller left."""
    case = stuck_case("truth-poll-1")
    queued = queue_retry_without_running_it(monkeypatch, case)
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    poller = re.search(r'<div id="case-live"[^>]*>', html)
    assert poller and 'hx-trigger="every 2s"' in poller.group(0)
    assert f'hx-get="/cases/{case.case_id}/"' in poller.group(0)
    from dashboard.staff.views import cases as case_views

    with monkeypatch.context() as cheap:  # a poll while the retry runs reads the case only
        cheap.setattr(case_views, "case_evidence", lambda *a, **k: pytest.fail("evidence read"))
        cheap.setattr(case_views, "case_timeline", lambda *a, **k: pytest.fail("timeline read"))
        again = staff_client.get(f"/cases/{case.case_id}/", **POLL)
    body = again.content.decode()
    assert again.status_code == 200 and body.lstrip().startswith('<div id="case-live"')
    assert 'hx-trigger="every 2s"' in body and "HX-Retarget" not in again
    assert queued.state == "OPEN"
    assert 'id="suggestion"' not in html  # the poller says what to wait for
    assert retry_commit_run(case.case_id, store=AS_SYSTEM.store).kind == "committed"
    done = staff_client.get(f"/cases/{case.case_id}/", **POLL)
    body = done.content.decode()
    assert done["HX-Retarget"] == "#case" and done["HX-Reswap"] == "outerHTML"
    assert body.lstrip().startswith('<div id="case"')
    assert "every 2s" not in body
    assert "Resolved" in headline(body)
    # The message of the POST ("will be retried") is replaced, out of band.
    oob = body[body.index('<div id="messages"') :]
    assert "The commit retry has ended: the case is resolved." in oob


def test_queue_table_polls_while_a_listed_case_has_a_retry_in_flight(
    ddb, staff_client, monkeypatch
):
    """The queue table reloads itself every 2 s while any case it lists has a retry in
    flight, and stops once none has."""
    case = stuck_case("truth-queue-1")
    idle = staff_client.get("/queues/stuck/").content.decode()
    assert "every 2s" not in idle
    queue_retry_without_running_it(monkeypatch, case)
    busy = staff_client.get("/queues/stuck/").content.decode()
    results = re.search(r'<section id="results"[^>]*>', busy)
    assert results and "every 2s" in results.group(0)
    retry_commit_run(case.case_id, store=AS_SYSTEM.store)
    assert "every 2s" not in staff_client.get("/queues/stuck/", **HX).content.decode()


def test_suggestion_is_shown_and_accepting_prefills_the_form(ddb, staff_client):
    """An open stuck case with no pledge inside its token window: the page suggests
    "Retry the commit" with its why; "Accept suggestion" answers the page with that
    choice checked and the reason pre-filled and editable; nothing is applied."""
    case = stuck_case("truth-suggest-1")
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    section = re.search(r'<section id="suggestion".*?</section>', html, re.S)
    assert section, "no suggestion shown"
    assert "No pledge exists and the attempt&#x27;s token window is open" in section.group(0)
    accept = f"/cases/{case.case_id}/?accept=RETRY_COMMIT"
    assert f'href="{accept}#act"' in section.group(0) and "Accept suggestion" in section.group(0)
    accepted = staff_client.get(accept, **HX).content.decode()
    assert re.search(r'value="RETRY_COMMIT"[^>]*checked', accepted)
    assert re.search(r'<option value="TRANSIENT_FAILURE" selected>', accepted)
    assert "finds no pledge for acme#truth-suggest-1" in accepted
    assert "<textarea" in accepted and "readonly" not in accepted
    stored = repositories().cases.get(case.case_id)
    assert stored.version == case.version and stored.retry is None
    # A stale or foreign accept pre-fills nothing.
    other = staff_client.get(f"/cases/{case.case_id}/?accept=VOID_PLEDGE").content.decode()
    assert not re.search(r'value="VOID_PLEDGE"[^>]*checked', other)


def test_auditor_sees_the_suggestion_without_a_button(ddb, auditor_client):
    """Auditors read the suggested next step, but are offered no button to accept it."""
    case = stuck_case("truth-suggest-2")
    html = auditor_client.get(f"/cases/{case.case_id}/").content.decode()
    assert 'id="suggestion"' in html and "Retry the commit" in html
    assert "Accept suggestion" not in html


def test_awaiting_approval_suggests_waiting_for_a_supervisor(ddb, staff_client):
    """An override request pending: the suggestion is to wait for a supervisor."""
    from reconciliation.casework.overrides import override_request

    case = stuck_case("truth-suggest-3")
    override_request(override="RELEASE_CLAIM", **acting().on(case, action_id="r", **WHY))
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    section = re.search(r'<section id="suggestion".*?</section>', html, re.S)
    assert section and "waiting for a supervisor&#x27;s decision" in section.group(0).lower()
    assert "Accept suggestion" not in html


def test_evidence_refresh_updates_banner_and_suggestion_out_of_band(ddb, staff_client, settings):
    """Refreshing the evidence also refreshes the banner and the suggestion (out of band),
    so a fresh read never sits beside a stale verdict."""
    case = stuck_case("truth-refresh-1")
    body = staff_client.get(f"/cases/{case.case_id}/evidence/", **HX).content.decode()
    assert body.lstrip().startswith('<section id="evidence"')
    assert re.search(r'<section id="headline"[^>]*hx-swap-oob="true"', body)
    assert re.search(r'<section id="suggestion"[^>]*hx-swap-oob="true"', body)
    assert re.search(r'<section id="act"[^>]*hx-swap-oob="true"', body)


def test_a_second_retry_is_neither_offered_nor_queued_while_one_runs(
    ddb, staff_client, monkeypatch
):
    """RETRY_COMMIT queued and not yet run: the page no longer offers "Retry the commit",
    and asking again (a second tab, a stale form) is refused with a clear message rather
    than queueing the same work twice; once the retry has run, the case is resolved."""
    from reconciliation.cases.changes import CaseError

    case = stuck_case("truth-second-retry")
    queued = queue_retry_without_running_it(monkeypatch, case)
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    assert 'value="RETRY_COMMIT"' not in html
    with pytest.raises(CaseError, match="has not finished yet"):
        dispose(queued, "RETRY_COMMIT", reason_code="TRANSIENT_FAILURE")
    assert repositories().cases.get(case.case_id).version == queued.version
    assert retry_commit_run(case.case_id, store=AS_SYSTEM.store).kind == "committed"


def test_evidence_refresh_leaves_the_actions_card_alone_while_its_offer_holds(
    ddb, staff_client, monkeypatch
):
    """The page sends the key of the actions card it shows; while the fresh read offers
    the same actions on the same case version, the card is not swapped, so a reason
    being typed survives "Refresh evidence". When the offer changes (a retry was queued
    meanwhile, from another tab), the card is replaced."""
    case = stuck_case("truth-refresh-keep")
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    key = re.search(r'<input type="hidden" id="offer-key" name="offer" value="([^"]*)"', html)
    assert key and 'hx-include="#offer-key"' in html
    same = staff_client.get(f"/cases/{case.case_id}/evidence/", {"offer": key.group(1)}, **HX)
    body = same.content.decode()
    assert re.search(r'<section id="headline"[^>]*hx-swap-oob="true"', body)
    assert 'id="act"' not in body
    queue_retry_without_running_it(monkeypatch, case)
    changed = staff_client.get(f"/cases/{case.case_id}/evidence/", {"offer": key.group(1)}, **HX)
    body = changed.content.decode()
    assert re.search(r'<section id="act"[^>]*hx-swap-oob="true"', body)
    assert 'value="RETRY_COMMIT"' not in body
