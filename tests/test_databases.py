"""The database a run is on (tests/databases.py): SQLite for ``make test``, the run's own
PostgreSQL cluster for ``make test-postgres``, and a fresh one for a test's processes."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from django.db import connection

from tests import databases


def test_the_run_is_on_the_database_it_was_asked_for(db):
    """Django's test database is PostgreSQL under TEST_DATABASE=postgres, SQLite else: a
    run that fell back to SQLite would pass while testing nothing of PostgreSQL."""
    if databases.on_postgres():
        assert connection.vendor == "postgresql"
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        name = connection.settings_dict["NAME"]
        assert name.startswith("test_") and (worker is None or name.endswith(f"_{worker}"))
    else:
        assert connection.vendor == "sqlite"


def test_each_test_s_processes_get_an_empty_database_of_their_own(
    subprocess_database_url, tmp_path
):
    """subprocess_database_url names a database no one has used: on PostgreSQL a new,
    empty database beside the test database; on SQLite a file yet to be made."""
    other = databases.subprocess_database_url(tmp_path / "other")
    try:
        assert other != subprocess_database_url
        if databases.on_postgres():
            import psycopg

            with psycopg.connect(subprocess_database_url) as conn:
                tables = conn.execute(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                ).fetchone()
            assert tables == (0,)
        else:
            assert subprocess_database_url == f"sqlite:///{tmp_path / 'db.sqlite3'}"
            assert not (tmp_path / "db.sqlite3").exists()
    finally:
        databases.drop_subprocess_database(other)


def _item(fixtures: list[str], marks: tuple[str, ...] = ()) -> pytest.Item:
    return SimpleNamespace(  # type: ignore[return-value]
        fixturenames=fixtures,
        get_closest_marker=lambda name: name if name in marks else None,
    )


def test_tests_touching_django_s_database_are_told_by_fixture_or_mark():
    """The database fixtures (also through another fixture), the live server, the mark,
    and the processes' database URL count; DynamoDB, Redis and settings do not."""
    assert databases.touches_django_database(_item(["api", "db", "client"]))
    assert databases.touches_django_database(_item(["transactional_db"]))
    assert databases.touches_django_database(_item(["live_server", "open_browser"]))
    assert databases.touches_django_database(_item(["ddb", "subprocess_database_url"]))
    assert databases.touches_django_database(_item(["ddb"], ("django_db",)))
    assert not databases.touches_django_database(_item(["ddb", "settings", "client"]))


def test_a_cluster_serves_loopback_only_to_a_role_that_is_no_superuser_and_leaves_nothing():
    """tests/postgres.py's cluster listens on 127.0.0.1 alone, with durability off, asks
    for the role's password, gives it no superuser rights (a deployment's application role
    has none), runs as an unprivileged user when we are root, and stop() removes it all."""
    import pwd

    import psycopg

    from tests import postgres

    try:
        cluster = postgres.start_cluster()
    except postgres.ClusterError as exc:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        with psycopg.connect(cluster.url()) as conn:
            settings = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN "
                    "('listen_addresses', 'fsync', 'synchronous_commit', 'full_page_writes')"
                ).fetchall()
            )
            rights = conn.execute(
                "SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
        assert settings == {
            "listen_addresses": "127.0.0.1",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        assert rights == (False, True)
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(cluster.url().replace(cluster.role_password, "wrong")).close()
        owner = pwd.getpwuid(cluster.data.stat().st_uid).pw_name
        assert owner == (cluster.user if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name)
        assert owner != "root"
    finally:
        cluster.stop()
    assert not cluster.root.exists()
