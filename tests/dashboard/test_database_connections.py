"""Django's database connections in the production server: gunicorn's threads keep theirs
between requests (``CONN_MAX_AGE``), so one the database server has since ended must be
found out before a request relies on it (``CONN_HEALTH_CHECKS``)."""

from __future__ import annotations

import psycopg
import pytest

from tests.reliability.procs import ApiServer, django_env

pytestmark = [
    pytest.mark.dynamodb_local_only,  # a real server process needs a real engine
    # SQLite has no server to end a connection: make test-postgres runs this.
    pytest.mark.postgres_only,
]


def _end_other_sessions(database_url: str) -> int:
    """End every session in the database but this one, as a server restart, a failover
    or an idle-session timeout does; how many were ended."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert ended is not None
    return int(ended[0])


def test_a_kept_connection_the_database_ended_is_replaced_before_the_next_request(
    ddb, settings, tmp_path, subprocess_database_url
):
    """PostgreSQL ends the connection a gunicorn thread kept from its last request: the
    thread's next API request is answered as the first was, not with a 500."""
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        redis_url=settings.REDIS_URL,
        database_url=subprocess_database_url,
    )
    # One worker with one thread: both requests go through the same kept connection.
    server = ApiServer(env, tmp_path, workers=1, threads=1)
    server.prepare("acme")
    server.start()
    try:
        client = server.client()
        first = client.get("never-sent")  # the token is looked up: a connection is kept
        assert first.status == 404, first
        assert _end_other_sessions(subprocess_database_url) == 1
        second = client.get("never-sent")
        assert second.status == 404, (second, server.process.tail())
    finally:
        server.stop()
