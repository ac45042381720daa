"""Detection sweeps: stuck claims become cases exactly once; committed ones resolve
themselves; the beat-scheduled task does it in a real Celery worker."""

from __future__ import annotations

import contextlib
import io
import os
import time

import pytest
from django.core.management import call_command

from reconciliation import clock
from reconciliation.casework.sweeps import sweep_all
from reconciliation.dynamo.items import to_item
from reconciliation.stores import every_store, home_store
from tests.helpers import acting, audit_events, cases, claims, pledges, repositories
from tests.processes import celery_beat, celery_worker, wait_for
from tests.reconciliation.factories import crashed_claim, submit

pytestmark = pytest.mark.django_db(databases=[])


def _completed_claims(ddb, n: int) -> None:
    """``n`` COMPLETED claims written directly (they are not in the sparse pending index)."""
    now = clock.epoch()
    for start in range(0, n, 25):
        batch = [
            {
                "PutRequest": {
                    "Item": to_item(
                        {
                            "pk": f"acme#create_pledge#done-{i}",
                            "status": "COMPLETED",
                            "version": 2,
                            "expires_at": now + 86400,
                            "request_token": f"tok-{i}",
                        }
                    )
                }
            }
            for i in range(start, min(start + 25, n))
        ]
        ddb.client.batch_write_item(RequestItems={ddb.tables.idempotency_keys: batch})


def test_sweep_opens_one_case_per_stuck_claim_and_is_idempotent(ddb):
    """1 000 completed claims + 7 stuck ones → exactly 7 STUCK_PENDING cases; a second
    sweep opens none; a claim still inside its lease is left alone."""
    _completed_claims(ddb, 1000)
    for i in range(7):
        crashed_claim(f"stuck-{i}")
    with clock.travel(200):
        crashed_claim("young")  # its lease has not run out at sweep time
        first = sweep_all(every_store(), home=home_store)
        second = sweep_all(every_store(), home=home_store)
    assert len(first.opened) == 7
    assert first.candidates == 7
    assert second.opened == [] and second.candidates == 0
    opened = cases(ddb)
    assert sorted(c["case_type"] for c in opened) == ["STUCK_PENDING"] * 7
    stuck = [c for c in claims(ddb) if c["pk"].startswith("acme#create_pledge#stuck-")]
    assert all("pending_shard" not in c and c["case_id"] for c in stuck)
    young = [c for c in claims(ddb) if c["pk"].endswith("#young")][0]
    assert young["status"] == "PENDING" and "pending_shard" in young
    assert repositories().cases.counts()["STUCK_PENDING"] == 7
    for case in opened:
        evidence = case["evidence"]
        assert '"pledge_exists": false' in evidence and '"token_age_s"' in evidence


def test_committed_but_stuck_claim_is_auto_resolved_with_its_event(ddb):
    """The pledge committed but the claim is PENDING (a re-claim's worker died): the sweep
    finalises the claim and resolves the case as CONFIRMED_COMMITTED by system."""
    assert submit("late-1").kind == "created"
    repos = repositories()
    claim = repos.claims.get("acme#create_pledge#late-1")
    item = repos.claims._to_item(claim)
    item.update(
        to_item(
            {
                "status": "PENDING",
                "version": 5,
                "pending_shard": "P#3",
                "expires_at": clock.epoch() - 1000,
            }
        )
    )
    ddb.client.put_item(TableName=ddb.tables.idempotency_keys, Item=item)
    report = sweep_all(every_store(), home=home_store)
    assert len(report.opened) == 1 and report.auto_resolved == report.opened
    [case] = cases(ddb)
    assert case["state"] == "RESOLVED" and "queue" not in case
    assert '"CONFIRMED_COMMITTED"' in case["resolution"]
    [stored] = claims(ddb)
    assert stored["status"] == "COMPLETED" and stored["version"] == 6
    events = audit_events(ddb, f"CASE#{case['case_id']}")
    assert [e["action"] for e in events] == ["case_opened", "disposition_recorded"]
    assert events[1]["actor"]["username"] == "system"
    assert events[1]["disposition"] == "CONFIRMED_COMMITTED"
    assert repos.cases.counts()["STUCK_PENDING"] == 0


def test_ambiguous_case_is_auto_resolved_when_the_pledge_exists(ddb):
    """An AMBIGUOUS_TIMEOUT case whose commit did go through is closed by the re-check."""
    from tests.reconciliation.factories import ambiguous_case

    case = ambiguous_case("amb-auto")
    report = sweep_all(every_store(), home=home_store)
    assert report.auto_resolved == [case.case_id]
    assert repositories().cases.get(case.case_id).state == "RESOLVED"


def test_a_queue_walk_reads_no_page_beyond_its_limit(ddb, monkeypatch):
    """A sweep's walk stops reading where its limit ends, even on a page boundary."""
    from reconciliation.cases import repository as case_repository
    from tests.reconciliation.factories import stuck_case

    opened = [stuck_case(f"walk-{i}").case_id for i in range(5)]
    monkeypatch.setattr(case_repository, "WALK_PAGE", 3)
    repo = repositories().cases
    pages: list[float] = []

    walked = [
        r["case_id"] for r in repo.walk_queue("STUCK_PENDING", limit=3, on_units=pages.append)
    ]
    assert len(walked) == 3 and set(walked) <= set(opened)
    assert len(pages) == 1

    pages.clear()
    everything = [r["case_id"] for r in repo.walk_queue("STUCK_PENDING", on_units=pages.append)]
    assert sorted(everything) == sorted(opened) and everything[:3] == walked
    assert len(pages) == 2


def test_retry_requested_while_the_broker_was_down_is_dispatched_again(ddb, monkeypatch):
    """RETRY_COMMIT requested while the broker refused the task stays 'queued'; once it
    is older than RETRY_STALE_S the sweep queues it again and the case resolves."""
    from kombu.exceptions import OperationalError

    from reconciliation.cases.vocabulary import Disposition
    from reconciliation.casework.dispositions import case_dispose
    from reconciliation.casework.sweeps import RETRY_STALE_S
    from reconciliation.casework.tasks import retry_commit_task
    from tests.reconciliation.factories import stuck_case

    def broker_refuses(*args: object) -> None:
        raise OperationalError("connection refused")

    case = stuck_case("redispatch-1")
    with monkeypatch.context() as broker_down:
        broker_down.setattr(retry_commit_task, "delay", broker_refuses)
        case_dispose(
            disposition=Disposition.RETRY_COMMIT,
            **acting("ada").on(
                case,
                reason_code="TRANSIENT_FAILURE",
                reason_text="The worker died; commit it again.",
            ),
        )
    assert repositories().cases.get(case.case_id).retry.status == "queued"
    assert sweep_all(every_store(), home=home_store).redispatched == []  # not stale yet
    with clock.travel(RETRY_STALE_S + 1):
        report = sweep_all(every_store(), home=home_store)
    assert report.redispatched == [case.case_id]
    assert repositories().cases.get(case.case_id).state == "RESOLVED"
    assert len(pledges(ddb)) == 1


def test_sweep_command_prints_what_it_opened(ddb):
    """`manage.py sweep` prints the opened case ids."""
    crashed_claim("cmd-1")
    out = io.StringIO()
    with clock.travel(200):
        call_command("sweep", stdout=out)
    [case] = cases(ddb)
    assert f"opened {case['case_id']}" in out.getvalue()
    assert "cases opened: 1" in out.getvalue()


@pytest.mark.celery_worker
def test_beat_scheduled_sweep_in_a_real_worker_opens_the_case(ddb, tmp_path):
    """Real celery beat (redbeat) and worker processes against Redis: a stuck claim
    becomes a STUCK_PENDING case through the beat-scheduled sweep task; beat starts
    without RedBeat's warning that it fell back on the broker's settings."""
    from django.conf import settings

    crashed_claim("beat-1")
    db = 10 + os.getpid() % 5
    env = dict(
        os.environ,
        DYNAMODB_ENDPOINT_URL=ddb.endpoint_url,
        DDB_TABLE_PREFIX=settings.DDB_TABLE_PREFIX,
        REDIS_URL=f"redis://127.0.0.1:6379/{db}",
        REDBEAT_KEY_PREFIX=f"redbeat:test-{os.getpid()}:",
        SWEEP_INTERVAL_S="2",
        STUCK_GRACE_S="0",
        CLAIM_PENDING_TTL_S="1",
        VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="dashboard.settings",
    )
    # The claim was written with the default 60 s lease; make it expired for real.
    ddb.client.update_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": "acme#create_pledge#beat-1"}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 5)}},
    )
    worker = celery_worker(env, tmp_path).start()
    beat = celery_beat(env, tmp_path).start()
    try:
        found: list[dict] = []
        with contextlib.suppress(AssertionError):  # the assertion below quotes the logs
            found = wait_for(lambda: cases(ddb), timeout=60, what="beat's sweep to open a case")
    finally:
        for proc in (beat, worker):
            proc.stop()
        logs = beat.log() + worker.log()
    assert [c["case_type"] for c in found] == ["STUCK_PENDING"], logs[-3000:]
    assert found[0]["last_actor"] == "system"
    assert "reconciliation.tasks.cases.sweep_task" in logs
    # RedBeat read its own settings, not the broker's as a fallback it warns about.
    assert "RedBeat will stop falling back" not in logs, logs[-3000:]


def test_a_case_records_its_claim_as_observed_the_moment_it_opened(ddb, settings):
    """Whether the sweep or the intake path opens it, a case's evidence holds the claim
    and its token window as they were at the instant the case opened."""
    from tests.reconciliation.factories import ambiguous_case, stuck_case

    settings.AUTO_RESOLVE_COMMITTED = False
    for case in (stuck_case("observed-1"), ambiguous_case("observed-2")):
        evidence = case.evidence
        assert evidence.observed_at == case.opened_at, case.case_type
        assert evidence.claim is not None and evidence.claim["pk"] == case.claim_pk
        assert evidence.token_window_s == 600
        assert evidence.token_age_s is not None
        assert evidence.inside_token_window is (evidence.token_age_s < 600)
