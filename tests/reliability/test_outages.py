"""Outages of the processes the system runs on: DynamoDB Local stopped and
restarted mid-run, Redis stopped mid-run, and a Celery pool process killed mid-task.
Each runs the real processes (gunicorn, celery worker and beat, redis-server) and ends
with the invariants of :mod:`tests.reliability.invariants`."""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
from collections import Counter

import pytest
from celery import Celery

from reconciliation.cases.vocabulary import CaseState, CaseType, Disposition
from reconciliation.casework import dispositions
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.models import intent_id_for
from reconciliation.stores import every_store, home_store
from tests.helpers import acting, audit_events, cases, claims, pledges, repositories
from tests.processes import celery_beat, celery_worker, wait_for
from tests.reconciliation.factories import crashed_claim, stuck_case
from tests.reliability.invariants import assert_invariants
from tests.reliability.procs import ApiServer, Tally, child_pids, django_env
from tests.reliability.workload import body_for, recorded, retry_open_cases

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.dynamodb_local_only,
    pytest.mark.django_db(databases=[]),
]

RETRY_TASK = "reconciliation.tasks.cases.retry_commit_task"


# --- DynamoDB Local stopped and restarted -----------------------------------------------

DDB_INTENTS = 150
DDB_CLIENTS = 8
DDB_CRASHED = 4
DOWN_S = 5.0


@pytest.mark.timeout(600)
def test_dynamodb_restart_mid_run_loses_nothing(  # noqa: C901, PLR0915
    disk_ddb, tmp_path, log_dir, record, settings
):
    """DynamoDB Local (on disk) is stopped while 8 clients post 150 pledges through
    gunicorn and started again: while it is down every answer is 503 (nothing recorded)
    or 202 (outcome unknown), the clients' retries commit every intent afterwards, and
    the sweep turns the claims of workers that died before the outage into cases whose
    RETRY_COMMIT commits them: nothing is lost."""
    ddb, engine = disk_ddb
    lease = 2
    settings.CLAIM_PENDING_TTL_S = lease
    settings.STUCK_GRACE_S = 0
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url="redis://127.0.0.1:1/0",
        CLAIM_PENDING_TTL_S=str(lease),
        STUCK_GRACE_S="0",
    )
    server = ApiServer(env, log_dir, workers=2, threads=4)
    server.prepare("acme")
    server.start()
    # Workers that died between claim and commit just before the outage.
    crashed = [f"crashed-{i}" for i in range(DDB_CRASHED)]
    for key in crashed:
        crashed_claim(key)

    keys = [f"ddb-{i:03d}" for i in range(DDB_INTENTS)]
    todo: queue.Queue = queue.Queue()
    for i, key in enumerate(keys):
        todo.put((key, body_for(i)))
    tally = Tally()
    done: list[str] = []
    deadline = time.monotonic() + 300

    def client() -> None:
        api = server.client()
        while True:
            try:
                key, body = todo.get_nowait()
            except queue.Empty:
                return
            while time.monotonic() < deadline:
                answer = api.post(key, body)
                tally.add("POST", key, answer)
                if answer.status in (200, 201):
                    done.append(key)
                    break
                if answer.status == 202:
                    # The documented recovery path: read the durable record.
                    found = api.get(key)
                    tally.add("GET", key, found)
                    if found.status == 200:
                        done.append(key)
                        break
                time.sleep(min(answer.retry_after, 1.0) if answer.status else 0.5)

    threads = [threading.Thread(target=client) for _ in range(DDB_CLIENTS)]
    started = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(done) >= DDB_INTENTS // 4, timeout=120, what="a quarter done")
        recorded_before = len(done)
        engine.stop()
        down_at = time.monotonic()
        time.sleep(DOWN_S)
        restart_at = time.monotonic()
        engine.start()
        up_at = time.monotonic()
        for thread in threads:
            thread.join(max(1.0, deadline - time.monotonic()))
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    log = server.process.log()

    def window(kind: str, lo: float, hi: float) -> Counter:
        return Counter(
            a.status for k, _, a in tally.answers if k == kind and a.started >= lo and a.ended <= hi
        )

    # Until the restarted engine answers, it is down (a JVM takes seconds to start).
    down_posts = window("POST", down_at, up_at)
    figures = {
        "intents": DDB_INTENTS,
        "clients": DDB_CLIENTS,
        "recorded_before_stop": recorded_before,
        "down_s": round(up_at - down_at, 1),
        "restart_s": round(up_at - restart_at, 1),
        "post_statuses": dict(sorted(tally.of("POST").items())),
        "get_statuses": dict(sorted(tally.of("GET").items())),
        "post_statuses_while_down": {str(k): v for k, v in sorted(down_posts.items())},
        "get_statuses_while_down": {
            str(k): v for k, v in sorted(window("GET", down_at, up_at).items())
        },
        "clients_done_s": round(elapsed, 1),
    }
    assert sorted(done) == sorted(keys), (figures, log[-3000:])
    assert down_posts[503] > 0 and set(down_posts) <= {503, 202}, figures
    assert set(Counter(a.status for k, _, a in tally.answers if k == "POST")) <= {
        201,
        200,
        202,
        409,
        503,
    }, figures

    # The sweep recovers: the dead workers' claims survived the restart and become cases.
    time.sleep(lease + 0.5)
    report = sweep_all(every_store(), home=home_store)
    stuck = [
        c
        for c in cases(ddb)
        if c["case_type"] == CaseType.STUCK_PENDING and c["state"] != CaseState.RESOLVED
    ]
    figures["sweep_opened"] = len(report.opened)
    figures["stuck_open_after_sweep"] = len(stuck)
    assert {c["intent_id"] for c in stuck} >= {intent_id_for("acme", k) for k in crashed}
    retried = retry_open_cases(ddb, CaseType.STUCK_PENDING)
    figures["retry_commit"] = dict(retried)
    assert recorded(crashed, "acme") == crashed
    assert recorded(keys, "acme") == keys
    assert len(pledges(ddb)) == DDB_INTENTS + DDB_CRASHED
    figures["invariants"] = assert_invariants(ddb).figures()
    record("dynamodb_restart", figures)


# --- Redis stopped ---------------------------------------------------------------------

REDIS_POSTS = 30
REDIS_CRASHED = 3
SWEEP_S = 2


def sweeps_done(worker) -> int:
    """Sweep tasks the worker has finished (from its log)."""
    return len(re.findall(r"sweep_task\[[^\]]+\] succeeded", worker.log()))


@pytest.mark.celery_worker
@pytest.mark.timeout(600)
def test_redis_outage_api_keeps_taking_pledges_and_sweeps_resume(  # noqa: PLR0915
    ddb, own_redis, tmp_path, log_dir, record, settings
):
    """With its Redis stopped the API still records every pledge (it never needs Redis),
    no sweep runs meanwhile, and once Redis is back the beat-scheduled sweep in the real
    worker opens a case for every claim whose worker died during the outage."""
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url=own_redis.url,
        SWEEP_INTERVAL_S=str(SWEEP_S),
        STUCK_GRACE_S="0",
    )
    server = ApiServer(env, log_dir, workers=1, threads=4)
    server.prepare("acme")
    worker = celery_worker(env, log_dir)
    beat = celery_beat(env, log_dir)
    figures: dict = {"sweep_interval_s": SWEEP_S}
    try:
        server.start()
        worker.start()
        beat.start()
        wait_for(
            lambda: sweeps_done(worker) >= 1,
            timeout=120,
            what="the beat sweep to run in the worker",
        )
        own_redis.stop()
        down_at = time.monotonic()
        api = server.client()
        answers = [api.post(f"redis-{i}", body_for(i)) for i in range(REDIS_POSTS)]
        figures["post_statuses_while_down"] = dict(Counter(a.status for a in answers))
        settings.CLAIM_PENDING_TTL_S = 1
        crashed = [f"redis-crashed-{i}" for i in range(REDIS_CRASHED)]
        for key in crashed:
            crashed_claim(key)
        # Three sweep intervals with the leases run out: nothing may open a case now.
        time.sleep(max(0.0, 3 * SWEEP_S - (time.monotonic() - down_at)) + 1.5)
        figures["cases_while_down"] = len(cases(ddb))
        figures["worker_alive_while_down"] = worker.alive()
        figures["beat_alive_while_down"] = beat.alive()
        sweeps_before = sweeps_done(worker)
        own_redis.start()
        up_at = time.monotonic()
        # celery beat (redbeat) exits when Redis goes away, and a Redis without
        # persistence comes back without redbeat's schedule and lock: beat must run under
        # a supervisor that restarts it (systemd Restart=always, Kubernetes), which this
        # test plays. The worker must reconnect by itself.
        figures["beat_restarted_by_supervisor"] = not beat.alive()
        if not beat.alive():
            beat.start()
        found = wait_for(
            lambda: (
                len([c for c in cases(ddb) if c["case_type"] == CaseType.STUCK_PENDING])
                >= REDIS_CRASHED
            ),
            timeout=120,
            what="the sweep to open the cases after Redis came back",
        )
        figures["redis_down_s"] = round(up_at - down_at, 1)
        figures["cases_opened_s_after_redis_back"] = round(time.monotonic() - up_at, 1)
        assert found
    finally:
        beat.stop()
        worker.stop()
        server.stop()
    logs = "\n".join(p.tail(3000) for p in (worker, beat))
    assert figures["post_statuses_while_down"] == {201: REDIS_POSTS}, (figures, logs)
    assert figures["cases_while_down"] == 0, figures
    assert figures["worker_alive_while_down"], logs
    after_loss = worker.log().rpartition("Connection to broker lost")[2]
    # "Connected to dashboard.celery_broker:Transport://…" (the broker's Redis transport).
    figures["worker_reconnected"] = "Connected to " in after_loss
    assert figures["worker_reconnected"], logs
    figures["sweeps_after_redis_back"] = sweeps_done(worker) - sweeps_before
    assert figures["sweeps_after_redis_back"] > 0, logs
    opened = {c["intent_id"] for c in cases(ddb) if c["case_type"] == CaseType.STUCK_PENDING}
    assert opened == {intent_id_for("acme", k) for k in crashed}
    assert all(c["last_actor"] == "system" for c in cases(ddb))
    figures["pledges"] = len(pledges(ddb))
    assert figures["pledges"] == REDIS_POSTS
    figures["invariants"] = assert_invariants(ddb).figures()
    record("redis_outage", figures)


# --- a Celery pool process killed mid-task ------------------------------------------------


@pytest.mark.celery_worker
@pytest.mark.timeout(600)
def test_worker_killed_mid_task_redelivers_and_commits_once(
    ddb, own_redis, tmp_path, log_dir, record, settings, monkeypatch
):
    """RETRY_COMMIT's task is slowed by the ``slow_task`` fault and its prefork pool
    process is SIGKILLed mid-task: the message is redelivered (``acks_late`` +
    ``reject_on_worker_lost``), the commit happens exactly once, and a further duplicate
    delivery of the same message changes nothing."""
    case = stuck_case("killed-1")
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url=own_redis.url,
        FAULT_INJECTION="slow_task=1",
        ALLOW_FAULT_INJECTION="1",
    )
    worker = celery_worker(env, log_dir, pool="prefork", concurrency=1)
    sender = Celery("reliability-sender", broker=own_redis.url, set_as_current=False)
    sent: list[str] = []

    def enqueue(case_id: str, request_id: str | None = None) -> None:
        # The same message the app sends, through this test's own broker.
        sent.append(sender.send_task(RETRY_TASK, args=[case_id, request_id]).id)

    monkeypatch.setattr(dispositions, "enqueue_retry", enqueue)
    figures: dict = {"pool": "prefork, concurrency 1"}
    try:
        worker.start()
        wait_for(lambda: " ready." in worker.log(), timeout=120, what="the worker to be ready")
        started = time.monotonic()
        case_dispose(
            disposition=Disposition.RETRY_COMMIT,
            **acting().on(
                case,
                seen_version=None,
                reason_code="TRANSIENT_FAILURE",
                reason_text="The worker died before committing; retry it.",
            ),
        )
        [task_id] = sent
        wait_for(lambda: "slow_task fault" in worker.log(), timeout=60, what="the task to start")
        [child] = child_pids(worker.pid)
        os.kill(child, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(
            lambda: repositories().cases.get(case.case_id).state == CaseState.RESOLVED,
            timeout=120,
            what="the redelivered task to resolve the case",
        )
        figures["resolved_s_after_kill"] = round(time.monotonic() - killed_at, 1)
        figures["total_s"] = round(time.monotonic() - started, 1)
        # A duplicate delivery after the effect (an ack lost the other way round).
        enqueue(case.case_id)
        wait_for(
            lambda: worker.log().count("'nothing_to_do'") >= 1,
            timeout=60,
            what="the duplicate delivery to finish",
        )
    finally:
        worker.stop()
        sender.close()
    log = worker.log()
    figures["deliveries_of_the_killed_message"] = log.count(f"[{task_id}] received")
    figures["worker_lost_logged"] = "WorkerLostError" in log or "SIGKILL" in log
    figures["task_results"] = re.findall(
        r"retry_commit_task\[[^]]+\] succeeded in [^:]+: (.+)", log
    )
    assert figures["deliveries_of_the_killed_message"] == 2, log[-4000:]
    assert figures["worker_lost_logged"], log[-4000:]
    # The redelivered message committed; the later duplicate found nothing to do.
    assert figures["task_results"] == ["'committed'", "'nothing_to_do'"], log[-4000:]
    assert len(pledges(ddb)) == 1
    [claim] = claims(ddb)
    assert claim["status"] == "COMPLETED"
    actions = [e["action"] for e in audit_events(ddb, f"CASE#{case.case_id}")]
    figures["case_events"] = actions
    assert actions == ["case_opened", "retry_commit_requested", "retry_commit_succeeded"]
    figures["invariants"] = assert_invariants(ddb).figures()
    record("worker_killed", figures)
