"""``Server-Timing``: DynamoDB round trips and time per request, on answers to signed-in
staff and accepted API callers only (dashboard/server_timing.py)."""

from __future__ import annotations

import re

import pytest

from dashboard.server_timing import HEADER
from reconciliation.dynamo import calls
from reconciliation.dynamo.client import dynamodb_client
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM, acting, overview_get, sign_in
from tests.reconciliation.factories import stuck_case

pytestmark = pytest.mark.django_db

TIMING_RE = re.compile(r'^ddb;desc="(\d+) calls";dur=(\d+\.\d), app;dur=(\d+\.\d)$')


def _timing(response) -> tuple[int, float, float]:
    match = TIMING_RE.match(response[HEADER])
    assert match, response[HEADER]
    return int(match[1]), float(match[2]), float(match[3])


class _Sent:
    """Every HTTP request the shared client sends, counted apart from the tally."""

    def __init__(self):
        from reconciliation.stores import every_store

        self.count = 0
        clients = {id(c): c for c in [dynamodb_client(), *(s.client for s in every_store())]}
        for client in clients.values():  # every region's
            client.meta.events.register("before-send.dynamodb", self._seen)

    def _seen(self, **_kwargs):
        self.count += 1


@pytest.mark.dynamodb_local_only  # moto answers inside botocore: nothing is sent
def test_api_new_pledge_is_two_round_trips_and_a_replay_one(ddb, api):
    """A new pledge's answer says 2 DynamoDB calls (the claim, and the commit that carries
    its request log entry), its replay's 1 (the claim's ALL_OLD; its log entry waits in
    the buffer), each count is what the client actually sent, and both entries are
    logged: the 201's by the commit, the replay's by one BatchWriteItem when flushed."""
    from reconciliation.claims.request_log import requests_for_key

    sent = _Sent()
    created = api.post("st-1", pledge_body())
    assert created.status_code == 201
    calls_made, ddb_ms, app_ms = _timing(created)
    assert calls_made == 2 == sent.count
    assert 0 < ddb_ms <= app_ms
    logged = requests_for_key("acme", "st-1", store=AS_SYSTEM.store)  # 1 call: a Query
    assert [(r.outcome, r.status) for r in logged] == [("created", None)]
    replay = api.post("st-1", pledge_body())
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert _timing(replay)[0] == 1 == sent.count - 3
    from reconciliation.claims.request_log_buffer import request_log_flush

    assert request_log_flush().written == 1 and sent.count == 5
    logged = requests_for_key("acme", "st-1", store=AS_SYSTEM.store)
    assert [(r.outcome, r.status, r.replayed) for r in logged] == [
        ("replayed", 200, True),
        ("created", None, False),
    ]


@pytest.mark.dynamodb_local_only
def test_staff_page_counts_what_the_page_read(ddb, staff_client):
    """A signed-in queue page and case page carry the number of DynamoDB calls they
    made, equal to the requests the client sent while rendering them."""
    case = stuck_case("st-2")
    for path in ("/queues/stuck/", f"/cases/{case.case_id}/"):
        sent = _Sent()
        response = staff_client.get(path)
        assert response.status_code == 200, path
        calls_made, _ddb_ms, _app_ms = _timing(response)
        assert calls_made == sent.count > 0, path


def test_anonymous_answers_carry_no_timings(ddb, api, client):
    """The sign-in page, a redirect to it, health checks and an API call with a bad
    token say nothing about the work behind them."""
    assert HEADER not in client.get("/accounts/login/")
    assert HEADER not in client.get("/queues/stuck/")
    assert HEADER not in client.get("/healthz")
    refused = client.post(
        "/api/v1/pledges",
        data=pledge_body(),
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer plg_wrong",
        HTTP_IDEMPOTENCY_KEY="st-3",
    )
    assert refused.status_code == 401 and HEADER not in refused


def test_a_session_signed_out_for_its_missing_second_factor_carries_no_timings(client, settings):
    """A supervisor with only a password is signed out on the way (dashboard/accounts/mfa.py):
    the user loaded before that is no longer who the request is for."""
    from tests.helpers import staff_user

    settings.STAFF_MFA_REQUIRED = True
    client.force_login(staff_user("sup", "supervisor"))

    response = client.get("/queues/stuck/")

    assert response.status_code == 302 and HEADER not in response


def test_tally_counts_only_inside_its_block(ddb):
    """Calls made outside a tally are not counted; nested tallies count apart."""
    client = dynamodb_client()
    client.describe_table(TableName=ddb.tables.cases)
    with calls.tally() as outer:
        client.describe_table(TableName=ddb.tables.cases)
        with calls.tally() as inner:
            client.describe_table(TableName=ddb.tables.cases)
        client.describe_table(TableName=ddb.tables.cases)
    assert (inner.calls, outer.calls) == (1, 2)
    assert inner.seconds > 0 and outer.seconds > 0


@pytest.mark.dynamodb_local_only
def test_audit_page_counts_the_reads_its_helper_threads_make(ddb, auditor_client):
    """The audit trail's search reads the day's index shards in a thread pool: its
    answer counts those calls too, as many as the client sent (it said "0 calls")."""
    from tests.helpers import audit_seed

    audit_seed(30, days=1)
    sent = _Sent()
    response = auditor_client.get("/audit/")
    assert response.status_code == 200
    calls_made, ddb_ms, _app_ms = _timing(response)
    assert calls_made == sent.count > 0
    assert ddb_ms > 0


def test_a_pool_carries_the_tally_of_the_thread_that_submits(ddb):
    """Calls made by a :class:`calls.TalliedPool`'s threads count in the submitting
    thread's tally; a plain pool's do not (which is why the audit page said 0)."""
    from concurrent.futures import ThreadPoolExecutor

    client = dynamodb_client()

    def describe(_n: int) -> None:
        client.describe_table(TableName=ddb.tables.cases)

    with calls.tally() as plain, ThreadPoolExecutor(4) as pool:
        list(pool.map(describe, range(8)))
    with calls.tally() as carried, calls.TalliedPool(4) as pool:
        list(pool.map(describe, range(8)))
    assert (plain.calls, carried.calls) == (0, 8)


def _seed_every_queue(per_queue: int, *, tag: str = "") -> None:
    """Open cases written directly into each queue of region ``tag``, by a client of
    their own that waits longer than the app's (a loaded DynamoDB Local is slow to
    write items with eight indexes, and seeding is not what is measured)."""
    import boto3
    from botocore.config import Config

    from bench.open_cases import open_cases_seed
    from reconciliation.stores import every_store

    for store in every_store():
        if store.tag == tag:
            seeder = boto3.client(
                "dynamodb",
                endpoint_url=store.client.meta.endpoint_url,
                region_name=store.client.meta.region_name,
                aws_access_key_id="local",
                aws_secret_access_key="local",
                config=Config(read_timeout=60, retries={"max_attempts": 1}),
            )
            open_cases_seed(seeder, store.tables.cases, per_queue, tag=tag, threads=1)


def _overview_calls(client) -> tuple[int, int]:
    sent = _Sent()
    response = client.get("/")
    assert response.status_code == 200
    return _timing(response)[0], sent.count


class _Refreshes:
    """The overview's refresh tasks queued, kept here instead of sent to Redis; ``run``
    runs them as a worker would (outside any request)."""

    def __init__(self, monkeypatch):
        from reconciliation.casework import tasks

        self.task = tasks.overview_summary_task
        self.queued = 0
        monkeypatch.setattr(self.task, "apply_async", self._queued)

    def _queued(self, *_args, **_kwargs):
        self.queued += 1

    def run(self) -> None:
        self.task()


def _ageing_row(html: str, queue_title: str) -> list[int]:
    ageing = html[html.index('<table class="ageing">') :]
    row = re.search(rf'<th scope="row">{queue_title}</th>(.*?)</tr>', ageing, re.S)
    assert row, queue_title
    return [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', row.group(1))]


@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize("role", ["supervisor", "finance_staff"])
def test_overview_reads_in_a_constant_number_of_calls(ddb, client, role, monkeypatch):
    """Seven queues of open cases, then four times as many, a case escalated and one
    assigned: every view makes at most 8 DynamoDB calls, as many as the client sent,
    with no summary kept yet, with it fresh and with it stale (the first view of a new
    install computed it itself: 74 calls here; before that every view made 37-39). A view
    finding none or a stale one shows what it has, says so and queues one refresh; the
    refresh runs off the request path and the next view shows it."""
    from reconciliation.casework.dispositions import case_assign, case_dispose

    refreshes = _Refreshes(monkeypatch)
    _seed_every_queue(3)
    sign_in(client, role)
    for _ in range(3):  # a new install: no summary kept, one refresh asked for by all
        missing, sent = _overview_calls(client)
        assert missing == sent and missing <= 8
    assert refreshes.queued == 1
    html = client.get("/").content.decode()
    assert "are being computed" in html and '<table class="ageing">' not in html

    refreshes.run()  # a worker
    kept, sent = _overview_calls(client)
    assert kept == sent and kept <= 8 and refreshes.queued == 1
    assert sum(_ageing_row(client.get("/").content.decode(), "Stuck claims")) == 3

    _seed_every_queue(12)  # the counts moved
    case = stuck_case("st-ov-1")
    case_dispose(
        disposition="ESCALATE",
        **acting("ada").on(case, reason_code="NEEDS_REVIEW", reason_text="Over to a supervisor."),
    )
    other = stuck_case("st-ov-2")
    case_assign(**acting("ada").on(other))
    for _ in range(3):  # stale: shown as it is, one refresh asked for by all viewers
        stale, sent = _overview_calls(client)
        assert stale == sent and stale <= 8
    assert refreshes.queued == 2
    html = client.get("/").content.decode()
    assert "being brought up to date" in html
    assert sum(_ageing_row(html, "Stuck claims")) == 3

    refreshes.run()  # a worker
    fresh, sent = _overview_calls(client)
    assert fresh == sent and fresh <= 8
    html = client.get("/").content.decode()
    assert "being brought up to date" not in html
    assert sum(_ageing_row(html, "Stuck claims")) == 12 + 1  # + st-ov-2; st-ov-1 moved on


@pytest.mark.dynamodb_local_only
def test_overview_over_two_regions_reads_in_a_constant_number_of_calls(
    two_regions, supervisor_client, monkeypatch
):
    """Open cases in every queue of both regions: a view with no summary kept and one
    with it fresh make one BatchGetItem per region (and the one UpdateItem that asks for
    a summary), whatever the queues hold."""
    _Refreshes(monkeypatch)
    _seed_every_queue(3)
    _seed_every_queue(3, tag="eu-west-1")
    missing, sent = _overview_calls(supervisor_client)  # none kept yet: shown without it
    assert missing == sent and missing <= 8
    html = overview_get(supervisor_client).content.decode()
    assert "42" in html  # 2 regions × 7 queues × 3 open cases, in the totals
    kept, sent = _overview_calls(supervisor_client)
    assert kept == sent and kept <= 8


class _RetriesQueued:
    """Commit retries queued by a RETRY_COMMIT, kept here instead of run inside the
    request (tests run Celery eagerly; a worker runs them, outside the POST)."""

    def __init__(self, monkeypatch):
        from celery import current_app

        from reconciliation.casework.retries import RETRY_COMMIT_TASK

        self.queued: list[tuple] = []
        task = current_app.tasks[RETRY_COMMIT_TASK]
        monkeypatch.setattr(task, "delay", lambda *args, **_kw: self.queued.append(args))


def _claim_shown(html: str) -> tuple[str, int]:
    """The claim's status and version as the case page's evidence panel shows them."""
    claim = html[html.index("<h3>Claim</h3>") : html.index("<h3>Pledge</h3>")]
    status = re.search(r'<dt>Status</dt><dd><span class="badge"[^>]*>([^<]+)</span>', claim)
    version = re.search(r"<dt>Version</dt><dd>(\d+) ", claim)
    assert status and version, claim
    return status.group(1), int(version.group(1))


def _case_for(kind: str, ddb):
    """The case each kind of action is posted on: one whose evidence lets it through."""
    from reconciliation.claims.models import ClaimStatus
    from tests.helpers import repositories
    from tests.reconciliation.factories import ambiguous_case, key_reuse_case

    if kind == "DUPLICATE_REJECTED_OK":
        return key_reuse_case(ddb, f"dc-{kind}")
    if kind not in ("CONFIRMED_COMMITTED", "VOID_PLEDGE"):
        return stuck_case(f"dc-{kind}")
    case = ambiguous_case(f"dc-{kind}")
    if kind == "CONFIRMED_COMMITTED":
        # A claim the commit did not complete (the disposition finalises it, in its own
        # transaction): the page must show it as written, without reading it.
        ddb.client.update_item(
            TableName=ddb.tables.idempotency_keys,
            Key={"pk": {"S": case.claim_pk}},
            UpdateExpression="SET #st = :p",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={":p": {"S": ClaimStatus.PENDING}},
        )
        assert repositories().claims.get(case.claim_pk).status == ClaimStatus.PENDING
    return case


@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize(
    ("kind", "path", "field", "reason_code"),
    [
        ("CONFIRMED_COMMITTED", "dispose", "disposition", "EVIDENCE_CONFIRMS"),
        ("RETRY_COMMIT", "dispose", "disposition", "TRANSIENT_FAILURE"),
        ("DUPLICATE_REJECTED_OK", "dispose", "disposition", "EVIDENCE_CONFIRMS"),
        ("ESCALATE", "dispose", "disposition", "NEEDS_REVIEW"),
        ("RELEASE_CLAIM", "override", "override", "CLIENT_CONFIRMED"),
        ("VOID_PLEDGE", "override", "override", "DONOR_REQUEST"),
    ],
)
def test_a_disposition_post_makes_at_most_six_calls(
    ddb, staff_client, settings, monkeypatch, kind, path, field, reason_code
):
    """An htmx disposition or override request answers with the case page in at most 6
    DynamoDB calls, as many as the client sent (it made 7-9, reading the case, claim and
    pledge again for the page), and the page shows the case, claim and pledge as they
    are stored after it."""
    import uuid

    from reconciliation.claims.models import ClaimStatus
    from tests.helpers import repositories

    settings.AUTO_RESOLVE_COMMITTED = False  # the case waits for the person
    retries = _RetriesQueued(monkeypatch)
    case = _case_for(kind, ddb)
    sent = _Sent()
    response = staff_client.post(
        f"/cases/{case.case_id}/{path}/",
        {
            "seen_version": case.version,
            "action_id": str(uuid.uuid4()),
            field: kind,
            "reason_code": reason_code,
            "reason_text": "Checked the consistent reads.",
        },
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert response.status_code == 200, body[:2000]
    calls_made, _ddb_ms, _app_ms = _timing(response)
    assert calls_made == sent.count and calls_made <= 6, calls_made
    assert len(retries.queued) == (kind == "RETRY_COMMIT")

    stored = repositories().cases.get(case.case_id)
    assert stored.version == case.version + 1
    assert f'name="seen_version" value="{stored.version}"' in body or stored.is_resolved
    claim = repositories().claims.get(case.claim_pk)
    assert _claim_shown(body) == (ClaimStatus.words(claim.status), claim.version)
    pledge = repositories().pledges.get(case.intent_id)
    assert ("A pledge <strong>is recorded</strong>" in body) is (pledge is not None)


@pytest.mark.dynamodb_local_only
def test_approvals_page_reads_evidence_in_batches(ddb, supervisor_client):
    """The approvals page shows each request's pledge and claim at a fixed number of
    DynamoDB calls: one pending request or four, the same count (batched reads, not a
    read per card), each what the client sent."""
    from tests.dashboard.test_approvals_views import requested

    requested("st-ap-1")
    sent = _Sent()
    one = supervisor_client.get("/approvals/")
    assert (
        one.status_code == 200 and "No pledge is recorded for this intent." in one.content.decode()
    )
    calls_one = _timing(one)[0]
    assert calls_one == sent.count
    for n in range(2, 5):
        requested(f"st-ap-{n}")
    sent = _Sent()
    four = supervisor_client.get("/approvals/")
    assert four.content.decode().count("No pledge is recorded for this intent.") == 4
    assert _timing(four)[0] == calls_one == sent.count
