"""The audit screens: role checks for search, export and download; finance staff limited
to their own events; cursor paging with and without htmx; chain status on the page;
background exports with a polled progress bar and an owner-only, audited download."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import uuid
from datetime import timedelta
from decimal import Decimal
from html import unescape

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.audit.export.background import export_request
from reconciliation.audit.filters import AuditFilters, FilterAsk
from reconciliation.audit.tasks import audit_export_task
from tests.helpers import AS_SYSTEM, audit_events, audit_seed, pass_second_factor, staff_user
from tests.processes import celery_worker, wait_for

# Views only: search, paging and export over both engines are tested in tests/reconciliation;
# the real-worker test below needs DynamoDB Local's endpoint and says so itself.
pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto"), pytest.mark.usefixtures("midday")]

ROLES = ("finance_staff", "supervisor", "auditor")


def user(username: str, role: str | None) -> User:
    return staff_user(username, role, password="pw-123456789")


def as_user(client, username: str | None, role: str | None = None):
    client.logout()
    if username:
        person = User.objects.filter(username=username).first() or user(username, role)
        client.force_login(person)
        pass_second_factor(client, person)
    return client


def seed(total: int = 60) -> list[dict]:
    return audit_seed(total, days=2)


def rng() -> dict:
    """The seeded days; today, where export events land, is left out."""
    today = clock.now().date()
    return {
        "since": (today - timedelta(days=3)).isoformat(),
        "until": (today - timedelta(days=1)).isoformat(),
    }


@pytest.fixture
def queued_celery():
    """Tasks go to the broker and results are read from Redis (tests run tasks inline
    by default: tests/conftest.py ``celery_eager``)."""
    conf = audit_export_task.app.conf
    before = conf.task_always_eager
    conf.task_always_eager = False
    yield
    conf.task_always_eager = before


def expect_login_redirect(response) -> None:
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_search_permissions_per_role(ddb, client):
    """Anonymous users go to sign-in, users without a staff group get 403, every staff
    role may search."""
    seed(20)
    expect_login_redirect(as_user(client, None).get("/audit/", rng()))
    assert as_user(client, "nobody", None).get("/audit/", rng()).status_code == 403
    for role in ROLES:
        response = as_user(client, f"u-{role}", role).get("/audit/", rng())
        assert response.status_code == 200, role
        assert b'id="audit-rows"' in response.content


def test_export_permissions_per_role(ddb, client, settings, tmp_path):
    """Streamed CSV and JSON Lines exports: sign-in redirect, 403 without a group, and a
    streamed file for every staff role."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    seed(20)
    for url in ("/audit/export.csv", "/audit/export.jsonl"):
        expect_login_redirect(as_user(client, None).get(url, rng()))
        assert as_user(client, "nobody", None).get(url, rng()).status_code == 403
        for role in ROLES:
            response = as_user(client, f"u-{role}", role).get(url, rng())
            assert response.status_code == 200 and response.streaming, (url, role)
            body = b"".join(response.streaming_content)
            # Finance staff performed none of the seeded events: an empty export.
            assert bool(body.count(b"\n") > 1) == (role != "finance_staff"), (url, role)
            exported = [e for e in audit_events(ddb, "EXPORT#") if e["actor"]["role"] == role]
            assert exported[-1]["action"] == "export_completed"
    expect_login_redirect(as_user(client, None).post("/audit/exports/", rng()))
    assert as_user(client, "nobody", None).post("/audit/exports/", rng()).status_code == 403


def test_download_is_owner_only_and_audited(ddb, client, settings, tmp_path):
    """A finished background export is downloadable by the user who requested it and by
    nobody else — not a supervisor, not another auditor — and each download is an event.
    (The task runs inline: tests/conftest.py ``celery_eager``.)"""
    settings.AUDIT_EXPORT_DIR = tmp_path
    events = seed(40)
    owner = as_user(client, "aud", "auditor")
    response = owner.post("/audit/exports/", {**rng(), "format": "csv"})
    assert response.status_code == 302
    export_id = response["Location"].rstrip("/").rsplit("/", 1)[-1]
    urls = [f"/audit/exports/{export_id}/download", f"/audit/exports/{export_id}/manifest.json"]
    for url in urls:
        expect_login_redirect(as_user(client, None).get(url))
        assert as_user(client, "nobody", None).get(url).status_code == 403
        for name, role in (("sup", "supervisor"), ("aud2", "auditor"), ("fin", "finance_staff")):
            assert as_user(client, name, role).get(url).status_code == 403, (url, role)
    assert (
        as_user(client, "sup", "supervisor").get(f"/audit/exports/{export_id}/").status_code == 403
    )

    client = as_user(client, "aud")
    data = client.get(urls[0])
    assert data.status_code == 200
    body = b"".join(data.streaming_content)
    assert data["Content-Disposition"] == f'attachment; filename="audit-{export_id}.csv"'
    manifest = json.loads(b"".join(client.get(urls[1]).streaming_content))
    assert manifest["sha256"] == hashlib.sha256(body).hexdigest()
    assert manifest["row_count"] == len(events)
    trail = audit_events(ddb, f"EXPORT#{export_id}")
    assert [e["action"] for e in trail] == [
        "export_requested",
        "export_completed",
        "export_downloaded",
        "export_downloaded",
    ]
    assert {e["actor"]["username"] for e in trail} == {"aud"}
    assert [e["detail"]["what"] for e in trail[2:]] == ["file", "manifest"]


def test_finance_staff_see_only_their_own_events_and_are_told(ddb, client, settings, tmp_path):
    """Finance staff get only the events they performed, whatever actor they type, on
    the page and in exports, and the page says so; auditors see everyone's."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    events = seed(200)
    own = [e for e in events if e["actor"]["username"] == "ada"]
    assert own and len(own) < len(events)
    ada = as_user(client, "ada", "finance_staff")
    page = ada.get("/audit/", {**rng(), "actor": "ben"})
    assert page.status_code == 200
    assert b"only the events you performed yourself" in page.content
    assert b"ben@example.org" not in page.content
    page = ada.get("/audit/", rng())
    actor_cell = r"<td>([^<]+)<br><span class=\"muted\">(?:Finance staff|Supervisor|API client)"
    shown = set(re.findall(actor_cell, page.content.decode()))
    assert shown == {"ada"}
    body = b"".join(ada.get("/audit/export.csv", rng()).streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode(), newline="")))
    assert len(rows) == len(own) and {r["actor_username"] for r in rows} == {"ada"}
    done = [e for e in audit_events(ddb, "EXPORT#") if e["action"] == "export_completed"]
    assert done[-1]["detail"]["filters"]["performed_by"] == "ada"
    auditor = as_user(client, "aud", "auditor").get("/audit/", {**rng(), "actor": "ben"})
    assert b"ben@example.org" in auditor.content
    assert b"only the events you performed yourself" not in auditor.content


def next_link(html: str) -> str | None:
    match = re.search(r'<a class="button" href="([^"]+)"\s+hx-get=', html)
    return unescape(match.group(1)) if match else None


def test_cursor_paging_without_javascript_and_with_htmx(ddb, client):
    """Plain GET pages follow the "Older events" link to the end without repeats; an
    htmx request gets only the rows partial; a forged cursor is a 400."""
    events = seed(120)
    auditor = as_user(client, "aud", "auditor")
    url = "/audit/?" + "&".join(f"{k}={v}" for k, v in rng().items())
    seen: list[str] = []
    pages = 0
    while url:
        response = auditor.get(url)
        assert response.status_code == 200
        html = response.content.decode()
        seen += re.findall(r'<td><time datetime="(\d{4}-[^"]+Z)"', html)
        url = next_link(html)
        pages += 1
    assert pages == 3
    assert seen == sorted((e["at"] for e in events), reverse=True)

    partial = auditor.get("/audit/", rng(), HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    assert partial.content.lstrip().startswith(b'<section id="audit-rows"')
    assert b"<html" not in partial.content and b"hx-get=" in partial.content
    bad = auditor.get("/audit/", {**rng(), "cursor": "eyJ2IjoxfQ"})
    assert bad.status_code == 400 and b"not one this search produced" in bad.content
    invalid = auditor.get("/audit/", {"since": "2026-13-45"})
    assert invalid.status_code == 400


def test_rows_link_to_cases_and_show_chain_status(ddb, client):
    """Rows with a case id show it, linked to the case page when a case can have it (the
    synthetic events' ``c00000007`` cannot: its route refuses it, so it is not a link); the
    page states the chain status of the streams shown and names a broken link."""
    events = seed(40)
    case_event = next(e for e in events if e.get("case_id"))
    auditor = as_user(client, "aud", "auditor")
    page = auditor.get("/audit/", {**rng(), "case_id": case_event["case_id"]}).content
    assert case_event["case_id"].encode() in page
    assert f'href="/cases/{case_event["case_id"]}/"'.encode() not in page
    assert b"chains intact" in page
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": case_event["stream"]}, "seq": {"N": "1"}},
        UpdateExpression="SET reason_code = :r",
        ExpressionAttributeValues={":r": {"S": "FORGED"}},
    )
    page = auditor.get("/audit/", {**rng(), "case_id": case_event["case_id"]}).content.decode()
    assert "chain broken" in page
    assert f"{case_event['stream']} seq 1: hash mismatch" in unescape(page)


def test_progress_bar_polls_until_the_export_is_done(
    ddb, client, settings, tmp_path, queued_celery
):
    """While the task runs, the status partial shows its reported progress and polls
    every second; once done it stops polling and offers the download and manifest."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    seed(30)
    owner = as_user(client, "aud", "auditor")
    actor = Actor("aud", Role.AUDITOR, "aud@example.org")
    export_id = export_request(
        filters=AuditFilters.build(FilterAsk(**rng())),
        fmt="jsonl",
        actor=actor,
        store=AS_SYSTEM.store,
    )
    backend = audit_export_task.backend
    backend.store_result(export_id, {"rows": 1200, "percent": 40.0}, "PROGRESS")
    try:
        partial = owner.get(f"/audit/exports/{export_id}/", HTTP_HX_REQUEST="true")
        html = partial.content.decode()
        assert partial.status_code == 200 and "<html" not in html
        assert 'hx-trigger="every 1s"' in html
        assert 'value="40.0"' in html and "1200 events so far" in html
        from reconciliation.audit.export.background import export_run_requested

        export_run_requested(export_id, store=AS_SYSTEM.store)
        done = owner.get(f"/audit/exports/{export_id}/", HTTP_HX_REQUEST="true").content
        assert b"hx-trigger" not in done
        assert f"/audit/exports/{export_id}/download".encode() in done
        assert f"/audit/exports/{export_id}/manifest.json".encode() in done
        page = owner.get(f"/audit/exports/{export_id}/")
        assert b"<html" in page.content and b"Download JSON Lines" in page.content
    finally:
        backend.forget(export_id)


@pytest.mark.celery_worker
@pytest.mark.engines("dynamodb_local")
def test_background_export_through_a_real_worker(ddb, client, settings, tmp_path, queued_celery):
    """A Celery worker runs a 4 000-event export: the polled page reports progress from
    the task state, then the owner downloads a file matching the signed manifest."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    seed(4000)
    queue = f"audit-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "DYNAMODB_ENDPOINT_URL": ddb.endpoint_url,
        "DDB_TABLE_PREFIX": django_settings.DDB_TABLE_PREFIX,
        "AUDIT_EXPORT_DIR": str(tmp_path),
        "AUDIT_SIGNING_KEY": django_settings.AUDIT_SIGNING_KEY,
        "REDIS_URL": django_settings.REDIS_URL,
    }
    worker = celery_worker(env, tmp_path, queue=queue).start()
    try:
        owner = as_user(client, "aud", "auditor")
        actor = Actor("aud", Role.AUDITOR, "aud@example.org")
        export_id = export_request(
            filters=AuditFilters.build(FilterAsk(**rng())),
            fmt="csv",
            actor=actor,
            store=AS_SYSTEM.store,
        )
        audit_export_task.apply_async(args=[export_id], task_id=export_id, queue=queue)
        states: list[str] = []

        def finished() -> bool:
            html = owner.get(f"/audit/exports/{export_id}/", HTTP_HX_REQUEST="true").content
            if b"Download CSV" in html:
                return True
            states.append("progress" if b"events so far" in html else "queued")
            return False

        try:
            wait_for(finished, timeout=120, interval=0.02, what="the export to finish")
        except AssertionError:
            pytest.fail(f"export did not finish; saw {states}")
        assert "progress" in states
        body = b"".join(owner.get(f"/audit/exports/{export_id}/download").streaming_content)
        manifest = json.loads(
            b"".join(owner.get(f"/audit/exports/{export_id}/manifest.json").streaming_content)
        )
        assert manifest["row_count"] == 4000
        assert manifest["sha256"] == hashlib.sha256(body).hexdigest()
    finally:
        worker.stop()
        audit_export_task.backend.forget(export_id)


def test_my_exports_lists_your_own_background_exports_newest_first(ddb, client, settings, tmp_path):
    """``GET /audit/exports/`` answered an empty 405: it is the signed-in person's own
    background exports, newest first, each with its state in words and a link to it;
    another person's exports are not there."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    seed(10)
    from reconciliation.audit.export.background import export_run_requested

    aud, other = (Actor(n, Role.AUDITOR, f"{n}@example.org") for n in ("aud", "aud2"))
    filters = AuditFilters.build(FilterAsk(**rng()))
    first = export_request(filters=filters, fmt="csv", actor=aud, store=AS_SYSTEM.store)
    export_run_requested(first, store=AS_SYSTEM.store)
    with clock.travel(5):
        second = export_request(filters=filters, fmt="jsonl", actor=aud, store=AS_SYSTEM.store)
        theirs = export_request(filters=filters, fmt="csv", actor=other, store=AS_SYSTEM.store)
    with clock.travel(6):
        page = as_user(client, "aud", "auditor").get("/audit/exports/")
    html = page.content.decode()
    assert page.status_code == 200 and "My exports" in html
    assert html.index(f"/audit/exports/{second}/") < html.index(f"/audit/exports/{first}/")
    assert theirs not in html
    assert "Done" in html and "10 events" in html and "In progress" in html
    assert "JSON Lines" in html and ">csv<" not in html


def test_a_streamed_export_is_on_my_exports_with_its_signed_manifest(
    ddb, client, settings, tmp_path
):
    """An export downloaded as it was made (``/audit/export.csv``) was on no page: its
    signed manifest was reachable only by an address typed from the help text. It is on
    My exports beside the background ones, with a link to its manifest, and its page
    says the file itself was streamed, not kept."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    seed(10)
    aud = as_user(client, "aud", "auditor")
    streamed = aud.get("/audit/export.csv", rng())
    body = b"".join(streamed.streaming_content)
    export_id = streamed["X-Audit-Export-Id"]
    assert body and export_id

    html = aud.get("/audit/exports/").content.decode()
    manifest_url = f"/audit/exports/{export_id}/manifest.json"
    assert f'href="{manifest_url}"' in html and "Streamed" in html
    manifest = aud.get(manifest_url)
    assert manifest.status_code == 200
    assert (
        json.loads(b"".join(manifest.streaming_content))["sha256"]
        == hashlib.sha256(body).hexdigest()
    )
    page = aud.get(f"/audit/exports/{export_id}/").content.decode()
    assert f'href="{manifest_url}"' in page and "not kept" in page
    assert f"/audit/exports/{export_id}/download" not in page
    # Another auditor's list does not show it.
    other = as_user(client, "aud2", "auditor").get("/audit/exports/").content.decode()
    assert export_id not in other


def test_an_export_page_says_its_filters_in_words(ddb, client, settings, tmp_path):
    """Not ``until=2026-…T23:59:59.999999Z, since=…`` and a lowercase "done": the dates
    as days, the action by its label, the state capitalised."""
    settings.AUDIT_EXPORT_DIR = tmp_path
    seed(10)
    from reconciliation.audit.export.background import export_run_requested

    aud = Actor("aud", Role.AUDITOR, "aud@example.org")
    filters = AuditFilters.build(FilterAsk(**rng(), action="case_opened"))
    export_id = export_request(filters=filters, fmt="csv", actor=aud, store=AS_SYSTEM.store)
    export_run_requested(export_id, store=AS_SYSTEM.store)
    html = unescape(
        as_user(client, "aud", "auditor").get(f"/audit/exports/{export_id}/").content.decode()
    )
    since, until = rng()["since"], rng()["until"]
    assert "T23:59:59" not in html and "since=" not in html
    assert f"From {since} to {until}" in html and "Action: Case opened" in html
    assert ">Done<" in html and ">done<" not in html and "Download CSV" in html


def test_the_action_filter_offers_each_action_by_its_label(ddb, client):
    """The Action filter was free text matching raw codes only ("Pledge recorded" found
    nothing): it is a list of labels whose values are the codes, so links keep working."""
    auditor = as_user(client, "aud", "auditor")
    html = auditor.get("/audit/").content.decode()
    assert '<select name="action"' in html
    assert '<option value="pledge_recorded">Pledge recorded</option>' in html
    assert auditor.get("/audit/", {**rng(), "action": "pledge_recorded"}).status_code == 200
    assert auditor.get("/audit/", {**rng(), "action": "no_such_action"}).status_code == 400


def _intent_events() -> None:
    """Events about the key ``k-42`` of two tenants, and a near miss (``k-420``)."""
    from reconciliation.actors import system_actor
    from reconciliation.audit.append import audit_event_append
    from reconciliation.audit.models import AuditAction, AuditEvent

    for intent in ("acme#k-42", "beta#k-42", "acme#k-420"):
        audit_event_append(
            AS_SYSTEM.store,
            stream=f"CLAIM#{intent}",
            event=AuditEvent(action=AuditAction.DRILL_RUN, actor=system_actor(), intent_id=intent),
        )


def _intents_shown(page: bytes) -> list[str]:
    return sorted(set(re.findall(r"(?:acme|beta)#k-42\d?", unescape(page.decode()))))


def test_intent_filter_accepts_the_clients_key_alone(ddb, client):
    """The intent filter wanted ``tenant#key``; a bare key (what staff are told) now
    matches that key under every tenant the system holds, ``tenant#key`` still only that
    tenant's, and nothing else (``k-420``)."""
    from dashboard.tenancy.models import Tenant

    for name in ("acme", "beta"):
        Tenant.objects.create(name=name)
    _intent_events()
    auditor = as_user(client, "aud", "auditor")
    bare = auditor.get("/audit/", {"intent_id": "k-42"})
    assert bare.status_code == 200
    assert _intents_shown(bare.content) == ["acme#k-42", "beta#k-42"]
    exact = auditor.get("/audit/", {"intent_id": "beta#k-42"})
    assert _intents_shown(exact.content) == ["beta#k-42"]


def test_a_bare_key_with_no_tenant_known_is_a_clear_error(ddb, client):
    """With no tenant to search a key under, the page says to enter tenant#key."""
    auditor = as_user(client, "aud", "auditor")
    response = auditor.get("/audit/", {"intent_id": "k-42"})
    assert response.status_code == 400
    assert "enter it as tenant#key" in response.content.decode()


def test_a_bare_key_export_keeps_the_tenants_it_was_searched_under():
    """An export made from a search's stored filters selects what the search showed."""
    from reconciliation.audit.export.background import filters_from_dict

    filters = AuditFilters.build(FilterAsk(intent_id="k-42"), intent_tenants=["beta", "acme"])
    assert filters.intent_ids() == ("acme#k-42", "beta#k-42")
    assert filters_from_dict(filters.as_dict()).intent_ids() == filters.intent_ids()
    assert AuditFilters.build(
        FilterAsk(intent_id="acme#k-42"), intent_tenants=["x"]
    ).intent_ids() == ("acme#k-42",)


def _change_lines(page: bytes) -> list[str]:
    html = unescape(page.decode())
    return [
        re.sub(r"\s+", " ", line).strip()
        for block in re.findall(r'<ul class="changes">(.*?)</ul>', html, re.S)
        for line in re.findall(r"<li>(.*?)</li>", block, re.S)
    ]


def test_rows_say_what_changed(ddb, client, settings):
    """Rows of events that change something say what, in words, from the event as
    stored: a staff role, a fund's limit, a pledge recorded and voided (amount and fund),
    a case's state and queue (they showed only the action's name)."""
    from dashboard.tenancy.models import Tenant
    from dashboard.tenancy.tenant_changes import fund_register
    from reconciliation.audit.models import AuditAction, AuditEvent
    from reconciliation.audit.staff import staff_event_append
    from reconciliation.claims.funds import Fund
    from tests.conftest import staff_actor
    from tests.reconciliation.factories import ambiguous_case, void_approved

    settings.AUTO_RESOLVE_COMMITTED = False
    admin = staff_actor("root", "admin")
    staff_event_append(
        AS_SYSTEM.store,
        username="ada",
        event=AuditEvent(
            action=AuditAction.STAFF_ROLE_CHANGED,
            actor=admin,
            before={"role": "finance_staff", "active": True},
            after={"role": "supervisor", "active": True},
        ),
    )
    acme = Tenant.objects.create(name="acme")
    fund_register(acme, Fund("GENERAL", "USD", Decimal("5000")), actor=admin)
    fund_register(acme, Fund("GENERAL", "USD", Decimal("12500")), actor=admin)

    case = ambiguous_case("chg-1", amount="1423.50", currency="USD")
    void_approved(case)

    auditor = as_user(client, "aud", "auditor")
    lines = _change_lines(auditor.get("/audit/").content)
    assert "Role: Finance staff → Supervisor" in lines
    assert "Limit of GENERAL: — → 5,000.00 USD" in lines
    assert "Limit of GENERAL: 5,000.00 USD → 12,500.00 USD" in lines
    pledged = [line for line in lines if line.startswith("Pledge: 1,423.50 USD to ")]
    assert len(pledged) == 2  # recorded, and voided
    assert "Status: Recorded → Voided" in lines
    assert "State: — → Open" in lines  # the case opened
    assert "Queue: Ambiguous timeouts → Awaiting approval" in lines  # the void asked for
    assert "State: Override requested → Resolved" in lines  # and approved
    assert "Queue: Awaiting approval → —" in lines


def test_an_older_void_and_an_unknown_shape_show_what_they_hold():
    """A void recorded before voids kept their amount says its status change only; an
    event of a shape the page does not know shows no line rather than an error."""
    from dashboard.staff.audit_changes import event_changes

    old_void = {
        "action": "pledge_voided",
        "before": {"status": "RECORDED"},
        "after": {"status": "VOIDED"},
        "detail": {"requested_by": "ada"},
    }
    assert [c.line for c in event_changes(old_void)] == ["Status: Recorded → Voided"]
    assert event_changes({"action": "fund_limit_changed", "before": "x", "after": 3}) == [
        event_changes({"action": "fund_limit_changed"})[0]
    ]
    assert event_changes({"action": "signed_out", "detail": {"via": "button"}}) == []


def _checkpointed_trail() -> list[str]:
    """Yesterday's and the day before's synthetic events, and the checkpoint task's
    first run over them: one checkpoint an hour from yesterday's first event to now."""
    from reconciliation.audit.checkpoints import audit_checkpoint

    seed(60)
    written = audit_checkpoint(AS_SYSTEM.store)
    assert len(written) > 20
    return written


def _days_to_today() -> dict:
    today = clock.now().date()
    return {"since": (today - timedelta(days=2)).isoformat(), "until": today.isoformat()}


def test_consecutive_checkpoints_are_one_row(ddb, client):
    """The hourly checkpoints, signed one after another, are one row that says how many
    and which periods (before: a row each, a day and a half of "Signed checkpoint"
    pushing the events off the page); the other events keep a row each."""
    written = _checkpointed_trail()
    html = unescape(
        as_user(client, "aud", "auditor").get("/audit/", _days_to_today()).content.decode()
    )
    assert html.count('<tr class="folded">') == 1
    assert f"Signed checkpoint × {len(written)}" in html
    assert len(re.findall(r"<td>Signed checkpoint(?! ×)", html)) == 0
    assert html.count("<tr>") > 2  # the header and the seeded events beside the fold


def test_system_events_can_be_hidden(ddb, client):
    """ "Hide system events" leaves the SYSTEM stream (signed checkpoints) out of the
    page, and out of an export of the same filters."""
    _checkpointed_trail()
    auditor = as_user(client, "aud", "auditor")
    html = unescape(
        auditor.get("/audit/", {**_days_to_today(), "hide_system": "on"}).content.decode()
    )
    assert "Hide system events" in html
    assert "Signed checkpoint" not in html.split('id="audit-rows"')[1]
    assert html.split('id="audit-rows"')[1].count("<tr>") > 2
    export = auditor.get("/audit/export.csv", {**_days_to_today(), "hide_system": "on"})
    body = b"".join(export.streaming_content).decode()
    assert "audit_checkpoint" not in body and len(body.splitlines()) > 2


def test_case_id_and_actor_filters_ignore_letter_case(ddb, client):
    """A case id typed in lower case, and an actor's username or address typed in
    another case than the account's, find the events (before: nothing)."""
    from reconciliation.audit.append import audit_event_append
    from reconciliation.audit.models import AuditAction, AuditEvent

    staff_user("Ada.Lovelace", "finance_staff", password="pw-123456789")
    User.objects.filter(username="Ada.Lovelace").update(email="Ada@Example.org")
    ada = Actor("Ada.Lovelace", Role.FINANCE_STAFF, "Ada@Example.org")
    case_id = "C-ABCDEFGHIJKLMNOP-eu-west-1"
    audit_event_append(
        AS_SYSTEM.store,
        stream=f"CASE#{case_id}",
        event=AuditEvent(action=AuditAction.CASE_ASSIGNED, actor=ada, case_id=case_id),
    )
    auditor = as_user(client, "aud", "auditor")
    for query in (
        {"case_id": "c-abcdefghijklmnop-EU-WEST-1"},
        {"case_id": case_id},
        {"actor": "ada.lovelace"},
        {"actor": "ADA.LOVELACE"},
        {"actor": "ada@example.org"},
    ):
        page = auditor.get("/audit/", query)
        assert page.status_code == 200
        assert page.content.decode().count(case_id) >= 1, query
    assert case_id not in auditor.get("/audit/", {"actor": "ada"}).content.decode()
