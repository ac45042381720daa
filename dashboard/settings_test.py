"""Settings for the test suite: production settings, reached over plain HTTP.

The test client speaks HTTP, so HTTPS redirects and secure-only cookies are off here.
Two more differences, both for speed and neither a behaviour under test: passwords are
hashed with MD5 (PBKDF2's 10^6 iterations cost ~0.3 s per user created or signed in),
and under pytest-xdist each worker uses a Redis database of its own. Everything else is
exactly dashboard.settings, on SQLite, or under ``make test-postgres`` on the
PostgreSQL database ``TEST_DATABASE_URL`` names (tests/databases.py), with the production
connection options. The production profile itself is checked by ``manage.py
check --deploy`` in tests/dashboard/test_security.py, and processes a test starts (make
run, Celery workers) run on dashboard.settings.
"""

import os
from urllib.parse import urlsplit, urlunsplit

import dj_database_url

os.environ.setdefault("DJANGO_HTTPS", "0")


def worker_redis_url(url: str, worker: str) -> str:
    """``url`` with its database number moved up by the xdist worker's index (``gw1``:
    +1, modulo Redis's 16 databases), so workers never share queues, results or locks.
    Set in the environment too, so the processes a test starts use the same database."""
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + int(worker.removeprefix('gw'))) % 16}"))


if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    # The URL before any worker's shift: a process started by a test that loads these
    # settings again inherits both variables and lands on the same database.
    base = os.environ.setdefault(
        "REDIS_URL_BEFORE_XDIST", os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    os.environ["REDIS_URL"] = worker_redis_url(base, os.environ["PYTEST_XDIST_WORKER"])

from dashboard.settings import *  # noqa: E402,F403
from dashboard.settings import DATABASES as _PRODUCTION_DATABASES  # noqa: E402
from dashboard.settings import INSTALLED_APPS as _PRODUCTION_APPS  # noqa: E402

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Production's connection options, for whichever database the tests use.
_PRODUCTION = _PRODUCTION_DATABASES["default"]
# (an in-memory SQLite URL, as the fault explorer's workers use, comes without them)
_CONN_MAX_AGE = _PRODUCTION.get("CONN_MAX_AGE", 0)
_CONN_HEALTH_CHECKS = _PRODUCTION.get("CONN_HEALTH_CHECKS", False)


def database_at(url: str) -> dj_database_url.DBConfig:
    """Django's settings for the database at ``url``, kept open and checked before reuse
    as production's are (the SQLite options of ``DATABASE_URL``'s default do not apply)."""
    return dj_database_url.parse(
        url, conn_max_age=_CONN_MAX_AGE, conn_health_checks=_CONN_HEALTH_CHECKS
    )


if os.environ.get("TEST_DATABASE") == "postgres" and os.environ.get("TEST_DATABASE_URL"):
    DATABASES = {"default": database_at(os.environ["TEST_DATABASE_URL"])}

# Tests turn fault injection on and off at run time (tests/fault_helpers.py), so the
# simulation app is installed whatever ALLOW_FAULT_INJECTION said at start; it attaches
# faults only while the settings allow and ask for them.
if "reconciliation.simulation" not in _PRODUCTION_APPS:
    INSTALLED_APPS = [*_PRODUCTION_APPS, "reconciliation.simulation"]
