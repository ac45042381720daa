"""Sign-in under concurrency, through the production server as shipped: gunicorn with
``dashboard/gunicorn_conf.py`` (2 workers × 8 threads), ``DJANGO_DEBUG=0``, its own
database file (SQLite, or PostgreSQL under ``make test-postgres``), Redis and DynamoDB
Local. Many people signing in at once, and many wrong passwords for one name at once,
never answer a server error, and the audit trail holds every sign-in and exactly one
lockout (docs/security.md)."""

from __future__ import annotations

import secrets
import sys
import threading
import uuid
from collections import Counter

import pytest
from django.conf import settings

from reconciliation.audit.models import AuditAction
from reconciliation.dynamo.local import free_port
from tests.helpers import audit_events
from tests.processes import Process, wait_for
from tests.reliability.procs import django_env, manage
from tests.staff_http import Conn, Reply, sign_in

# A gunicorn of its own per test: handed out first under xdist.
pytestmark = [pytest.mark.dynamodb_local_only, pytest.mark.long]

PEOPLE = 20
PASSWORD = "Concurrent-sign-in-2026!"
TARGET = "guessed"

# One hash for every account (the same password): at the shipped 1,000,000 PBKDF2
# iterations each hash is a third of a second of CPU, and hashing is not what is tested
# here. Signing in still checks each password in full.
_USERS = f"""
from django.contrib.auth import base_user, hashers
from django.core.management import call_command
hashed = hashers.make_password({PASSWORD!r})
base_user.make_password = lambda raw, *a, **k: (
    hashed if raw == {PASSWORD!r} else hashers.make_password(raw, *a, **k)
)
for name in [f"person{{n}}" for n in range({PEOPLE})] + [{TARGET!r}]:
    call_command("add_staff", name, role="finance_staff", password={PASSWORD!r})
"""


@pytest.fixture
def web(ddb, tmp_path, subprocess_database_url):
    """The shipped gunicorn on a free port, with PEOPLE staff and one more account."""
    port = free_port()
    env = django_env(
        tmp_path,
        database_url=subprocess_database_url,
        endpoint_url=ddb.endpoint_url,
        table_prefix=ddb.tables.idempotency_keys.removesuffix("idempotency_keys"),
        redis_url=settings.REDIS_URL,
        SIGNIN_LOCKOUT_PREFIX=f"signin-lockout:test:{uuid.uuid4().hex}:",
        STAFF_MFA_REQUIRED="0",
        WEB_PORT=str(port),
        WEB_CONCURRENCY="2",
        WEB_THREADS="8",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prometheus"),
    )
    (tmp_path / "prometheus").mkdir()
    manage(env, "migrate", "--noinput")
    manage(env, "shell", "-c", _USERS)
    server = Process(
        [sys.executable, "-m", "gunicorn", "--config", "python:dashboard.gunicorn_conf"]
        + ["dashboard.wsgi"],
        env=env,
        log_path=tmp_path / "gunicorn.log",
    ).start()

    def answers() -> bool:
        assert server.alive(), server.tail()
        try:
            return Conn(port, timeout=2).request("GET", "/healthz").status in (200, 503)
        except OSError:
            return False

    try:
        wait_for(answers, timeout=60, what="gunicorn to answer")
        yield port, server
    finally:
        server.stop()


def at_once(port: int, logins: list[tuple[str, str]]) -> list[Reply]:
    """Each (username, password) on a connection of its own, the POSTs released together."""
    barrier = threading.Barrier(len(logins))
    replies: list[Reply | BaseException] = [RuntimeError("not run")] * len(logins)

    def one(i: int, username: str, password: str) -> None:
        conn = Conn(port, timeout=60)
        try:
            replies[i] = sign_in(conn, username, password, before_post=barrier.wait)
        except BaseException as exc:  # noqa: BLE001 - reported below with the others
            barrier.abort()
            replies[i] = exc
        finally:
            conn.close()

    threads = [
        threading.Thread(target=one, args=(i, name, pw)) for i, (name, pw) in enumerate(logins)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    problems = [r for r in replies if isinstance(r, BaseException)]
    assert not problems, problems[:3]
    return replies  # type: ignore[return-value]


def actions(ddb, username: str) -> Counter:
    return Counter(e["action"] for e in audit_events(ddb) if e["stream"] == f"STAFF#{username}")


def test_many_people_sign_in_at_once_without_a_server_error(ddb, web):
    """20 people sign in at the same moment, twice over: every answer is the redirect of
    a sign-in (none is a 500 "database is locked"), and each person's stream holds two
    sign-in events."""
    port, server = web
    for _round in range(2):
        replies = at_once(port, [(f"person{n}", PASSWORD) for n in range(PEOPLE)])
        statuses = Counter(r.status for r in replies)
        assert statuses == {302: PEOPLE}, (statuses, server.tail())
    for n in range(PEOPLE):
        assert actions(ddb, f"person{n}")[AuditAction.SIGN_IN_SUCCEEDED] == 2, n
    assert "database is locked" not in server.log()


def test_many_wrong_passwords_at_once_lock_out_once(ddb, web):
    """20 wrong passwords for one name at the same moment: no answer is a server error,
    only AXES_FAILURE_LIMIT of them are checked (each a failure event), and exactly one
    lockout event reaches the trail."""
    port, server = web
    replies = at_once(port, [(TARGET, secrets.token_urlsafe(12)) for _ in range(PEOPLE)])
    statuses = Counter(r.status for r in replies)
    assert all(status < 500 for status in statuses), (statuses, server.tail())
    assert 302 not in statuses
    seen = actions(ddb, TARGET)
    limit = 5  # AXES_FAILURE_LIMIT's default, which the server runs with
    assert seen[AuditAction.SIGN_IN_FAILED] == limit, seen
    assert seen[AuditAction.SIGN_IN_LOCKED_OUT] == 1, seen
    # The right password is refused too while the lockout lasts.
    (late,) = at_once(port, [(TARGET, PASSWORD)])
    assert late.status != 302 and late.status < 500, late.status
