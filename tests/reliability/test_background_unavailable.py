"""Staff actions that start or read background work while Redis is unreachable: refused
(REDIS_URL at a closed port) or hung (a ``redis-server`` stopped with SIGSTOP). Every
such request answers within seconds with a clear page, never a 500 and never a hang, and
no background export is left requested with nothing to complete it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from reconciliation.audit.export.background import export_request, export_status
from reconciliation.audit.filters import AuditFilters, FilterAsk
from reconciliation.dynamo.local import free_port
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM, audit_events
from tests.processes import ROOT
from tests.reconciliation.factories import stuck_case
from tests.reliability.procs import django_env, manage

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.dynamodb_local_only,
    pytest.mark.django_db(databases=[]),
]

UNAVAILABLE = "Background work is unavailable; nothing was started."
# "Within a few seconds": the bound is the configured socket timeouts and one publish
# retry; a hang (minutes) or the old 19 s of connection retries fails this.
BOUND_S = 8.0


def staff_requests(env: dict, case_id: str, export_id: str) -> dict[str, dict]:
    manage(env, "migrate", "--noinput")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "tests.reliability.staff_requests", case_id, export_id],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    answers = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            answer = json.loads(line)
            answers[answer["request"]] = answer
    answers["_total_s"] = {"seconds": round(time.monotonic() - started, 1)}
    return answers


def background_export_requested(settings) -> str:
    """A background export the supervisor requested while Redis was up (still running)."""
    today = time.strftime("%Y-%m-%d", time.gmtime())
    filters = AuditFilters.build(FilterAsk(since=today, until=today), max_days=None)
    return export_request(
        filters=filters,
        fmt="csv",
        actor=staff_actor("supervisor", "supervisor"),
        store=AS_SYSTEM.store,
    )


def assert_clear_answers(ddb, answers: dict, export_id: str) -> None:
    figures = {k: (v.get("status"), v["seconds"]) for k, v in answers.items()}
    for name in ("export_start", "drill_start", "drill_page", "export_status", "retry_commit"):
        answer = answers[name]
        assert answer["status"] not in (500, 502, 504), (name, figures, answer["body"][-2000:])
        assert answer["seconds"] < BOUND_S, (name, figures)
    assert UNAVAILABLE in answers["export_start"]["body"], figures
    assert answers["export_start"]["status"] == 503, figures
    assert UNAVAILABLE in answers["drill_start"]["body"], figures
    assert answers["export_status"]["status"] == 200, figures
    assert "Background work is unavailable" in answers["export_status"]["body"], figures
    # The disposition is recorded; the case keeps its queued retry for the sweep.
    assert answers["retry_commit"]["status"] == 200, figures
    # No export request is left that nothing will ever complete: the refused one is
    # closed in its own stream, the earlier one is still running (its task is queued).
    streams: dict[str, list[str]] = {}
    for event in audit_events(ddb, "EXPORT#"):
        streams.setdefault(event["stream"], []).append(event["action"])
    refused = {s: a for s, a in streams.items() if s != f"EXPORT#{export_id}"}
    assert all(a[-1] != "export_requested" for a in refused.values()), refused
    assert export_status(export_id, store=AS_SYSTEM.store).state == "requested"


@pytest.mark.timeout(300)
def test_staff_background_actions_with_redis_refusing(ddb, tmp_path, settings):
    """REDIS_URL names a closed port: the export, the drill, the export status page and a
    RETRY_COMMIT each answer within seconds with a clear page; nothing is orphaned."""
    case = stuck_case("bg-refused")
    export_id = background_export_requested(settings)
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
    )
    answers = staff_requests(env, case.case_id, export_id)
    assert_clear_answers(ddb, answers, export_id)


@pytest.mark.timeout(300)
def test_staff_background_actions_with_redis_hung(ddb, own_redis, tmp_path, settings):
    """The Redis answers TCP but never replies (SIGSTOP): the same requests answer within
    seconds instead of hanging for minutes."""
    case = stuck_case("bg-hung")
    export_id = background_export_requested(settings)
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url=own_redis.url,
    )
    os.kill(own_redis.process.pid, signal.SIGSTOP)
    try:
        answers = staff_requests(env, case.case_id, export_id)
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
    assert_clear_answers(ddb, answers, export_id)
