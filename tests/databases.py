"""Which Django database a test run, and the processes its tests start, use.

``make test`` runs on SQLite (the settings' default: an in-memory test database, and a
file in the test's folder for each process a test starts). ``TEST_DATABASE=postgres``
(``make test-postgres``) runs on PostgreSQL instead: one throw-away cluster for the run
(tests/postgres.py), started by the first pytest process and announced to the xdist
workers and to the test settings through ``TEST_DATABASE_URL``; pytest-django creates a
test database per worker on it (``test_pledges_gw0``…), and each test whose processes
need a database gets a fresh one there. Give ``TEST_DATABASE_URL`` yourself to use a
server of your own (its role must be allowed to create databases).

Such a run keeps only the tests that touch Django's database (:func:`touches_django_database`):
the rest would run exactly as on SQLite.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests import postgres

# pytest-django's fixtures that open the test database (``db`` also stands for those
# built on it: ``admin_user``, ``admin_client``, the suite's ``api``), the live server
# (whose threads use it), and the URL for the processes a test starts.
DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
        "subprocess_database_url",
    }
)
_CLUSTER = pytest.StashKey[postgres.Cluster]()


def on_postgres() -> bool:
    """Whether this run is ``make test-postgres``'s."""
    return os.environ.get("TEST_DATABASE", "") == "postgres"


def touches_django_database(item: pytest.Item) -> bool:
    """Whether ``item`` reaches Django's database: through one of
    :data:`DATABASE_FIXTURES` (directly or through a fixture it uses) or the
    ``django_db`` mark. A test that opens it any other way fails on SQLite too:
    pytest-django refuses database access without one of these."""
    return bool(DATABASE_FIXTURES & set(item.fixturenames)) or (
        item.get_closest_marker("django_db") is not None
    )


def run_database_url() -> str:
    """The run's PostgreSQL URL (``TEST_DATABASE_URL``); only under :func:`on_postgres`."""
    url = os.environ.get("TEST_DATABASE_URL", "")
    if not url:
        raise RuntimeError("TEST_DATABASE=postgres but no TEST_DATABASE_URL: no cluster started")
    return url


def subprocess_database_url(tmp_path: Path) -> str:
    """The ``DATABASE_URL`` for the processes a test starts (gunicorn, ``manage.py``,
    ``make run``): a fresh SQLite file under ``tmp_path``, or under ``make test-postgres``
    a fresh database on the run's cluster (empty: the processes migrate it)."""
    if not on_postgres():
        return f"sqlite:///{tmp_path / 'db.sqlite3'}"
    return postgres.create_database(run_database_url(), f"proc_{uuid.uuid4().hex[:16]}")


def drop_subprocess_database(url: str) -> None:
    """Drop a database :func:`subprocess_database_url` made (a SQLite file goes with its
    folder), whoever is still connected."""
    if url.startswith("postgres"):
        postgres.drop_database(url)


def configure(config: pytest.Config) -> None:
    """Under ``TEST_DATABASE=postgres``, in the first pytest process (not an xdist
    worker, which inherits the URL): start the cluster unless ``TEST_DATABASE_URL``
    names a server already, and point Django's settings at it."""
    if not on_postgres() or hasattr(config, "workerinput"):
        return
    if not os.environ.get("TEST_DATABASE_URL"):
        cluster = postgres.start_cluster()
        config.stash[_CLUSTER] = cluster
        os.environ["TEST_DATABASE_URL"] = cluster.url()
    # pytest-django loaded the settings before any conftest ran, so without xdist this
    # process read them before the URL existed (workers start after it, and read it).
    from django.conf import settings
    from django.db import connections

    from dashboard.settings_test import database_at

    # In place: Django's ConnectionHandler keeps the dict it read, and fills in defaults
    # again when its cached ``settings`` goes.
    default, wanted = settings.DATABASES["default"], database_at(run_database_url())
    default.clear()
    default.update(wanted)
    connections.__dict__.pop("settings", None)
    for made in connections.all(initialized_only=True):  # made on the old settings
        made.close()
        del connections[made.alias]


def unconfigure(config: pytest.Config, *, keep_log: Path) -> None:
    """Stop and remove the cluster this process started, if any, keeping its server log
    at ``keep_log``."""
    cluster = config.stash.get(_CLUSTER, None)
    if cluster is not None:
        del config.stash[_CLUSTER]
        cluster.stop(keep_log=keep_log)


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``TEST_DATABASE=postgres``, deselect the tests that do not touch Django's
    database; otherwise the ones marked ``postgres_only`` (what only a database server
    can do: they are ``make test-postgres``'s, never skipped)."""
    if not on_postgres():
        elsewhere = [item for item in items if item.get_closest_marker("postgres_only")]
        if elsewhere:
            config.hook.pytest_deselected(items=elsewhere)
            items[:] = [item for item in items if not item.get_closest_marker("postgres_only")]
        return
    kept = [item for item in items if touches_django_database(item)]
    if len(kept) < len(items):
        dropped = [item for item in items if not touches_django_database(item)]
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
