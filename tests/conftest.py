"""Engine fixtures: every DynamoDB-backed test runs on each engine that honours what it
tests (docs/design.md §10). ``ddb`` is parametrised over moto (in-process ``mock_aws``) and
DynamoDB Local (AWS's engine, one per test session, so one per xdist worker); tests
marked ``token_semantics`` or ``dynamodb_local_only`` get DynamoDB Local alone. Tables
come from a pool per engine and session (tests/table_pool.py): empty, as if new.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import boto3
import moto  # noqa: F401 (before any boto3 session: its stub is one of botocore's built-in handlers)
import pytest
from django.db.backends.signals import connection_created

from reconciliation.dynamo.client import TableNames, dynamodb_client, regions, reset_clients
from reconciliation.dynamo.local import LocalEngine, LocalEngineError, start_dynamodb_local
from reconciliation.dynamo.tables import drop_tables, ensure_tables
from reconciliation.simulation import faults
from tests import databases
from tests.iam_recorder import ENGINE_SKIP, IamRecorderPlugin, Recorder, install
from tests.table_pool import TablePool, unique_names

ENGINES = ("moto", "dynamodb_local")
LOCAL_ONLY_MARKERS = ("token_semantics", "dynamodb_local_only", "celery_worker", "browser")
OUTPUT_DIR = Path(os.environ.get("TEST_OUTPUT_DIR", Path(__file__).parent.parent / "test-results"))


def _sqlite_reads_beside_a_writer(sender, connection, **kwargs) -> None:
    """Django's SQLite test database is one in-memory database in shared-cache mode: there
    a reader beside another thread's write fails at once with "database table is locked",
    where the file database of a real deployment waits (busy timeout). Tests with many
    threads (32 requests at a barrier) read as a deployment does."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 1")


connection_created.connect(_sqlite_reads_beside_a_writer, dispatch_uid="tests.sqlite_reads")


@dataclass
class Engine:
    name: str
    client: object
    tables: TableNames
    endpoint_url: str | None

    @property
    def honours_token(self) -> bool:
        return self.name == "dynamodb_local"


def pytest_configure(config: pytest.Config) -> None:
    """The database the run asked for (tests/databases.py), and every DynamoDB call the
    code makes is checked against ``manage.py iam_policy`` (tests/iam_recorder.py)."""
    databases.configure(config)
    recorder = Recorder()
    install(recorder)
    config.pluginmanager.register(IamRecorderPlugin(config, recorder), "iam_recorder")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ddb" not in metafunc.fixturenames:
        return
    local_only = any(metafunc.definition.get_closest_marker(m) for m in LOCAL_ONLY_MARKERS)
    engines = ("dynamodb_local",) if local_only else ENGINES
    chosen = metafunc.definition.get_closest_marker("engines")
    if chosen:
        engines = tuple(chosen.args)
    metafunc.parametrize("ddb", engines, indirect=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    databases.unconfigure(config, keep_log=OUTPUT_DIR / "postgresql.log")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``TEST_DATABASE=postgres`` only the tests that touch Django's database
    (tests/databases.py). Then longest first. Under ``--dist loadfile
    --no-loadscope-reorder`` (the Makefile) each xdist worker takes a whole file when it
    runs low, in this order: files holding tests marked ``long`` (whole process sets, a
    browser over every page) first, the most such tests first, then the rest with the
    most tests first. No long file then starts last and runs alone while the other worker
    idles. A file keeps its own order."""
    databases.select(config, items)
    tests: dict[Path, int] = {}
    long_tests: dict[Path, int] = {}
    for item in items:
        tests[item.path] = tests.get(item.path, 0) + 1
        if item.get_closest_marker("long"):
            long_tests[item.path] = long_tests.get(item.path, 0) + 1
    items.sort(key=lambda item: (-long_tests.get(item.path, 0), -tests[item.path]))


def local_engine_unavailable(exc: LocalEngineError) -> NoReturn:
    """Under CI a DynamoDB Local that does not start fails the run; elsewhere it skips."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"DynamoDB Local must run under CI: {exc}")
    pytest.skip(f"{ENGINE_SKIP}: {exc}")


def fresh_tables(settings, endpoint_url: str | None, *, tag: str = "t") -> tuple[Any, TableNames]:
    """Point the settings at ``endpoint_url`` (``None``: moto) and create every table
    under a unique prefix, with no regions and no faults; return the client and names."""
    names = TableNames.from_prefix(f"{tag}{uuid.uuid4().hex[:10]}-")
    settings.DDB_TABLE_PREFIX = names.idempotency_keys.removesuffix("idempotency_keys")
    settings.DDB_REGIONS = ""
    settings.DDB_PRIMARY_REGION = ""
    settings.FAULT_INJECTION = ""
    settings.DYNAMODB_ENDPOINT_URL = endpoint_url
    faults.set_plan(None)
    reset_clients()
    client = dynamodb_client()
    ensure_tables(client, names)
    return client, names


def worker_suffix() -> str:
    """``-gw0``, ``-gw1``… under pytest-xdist (each worker is a session of its own), else ``""``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"-{worker}" if worker else ""


@pytest.fixture(scope="session")
def dynamodb_local() -> Iterator[LocalEngine]:
    """One DynamoDB Local for the session (per xdist worker), on a free port. Under CI it
    must start."""
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
    try:
        engine = start_dynamodb_local(log_path=OUTPUT_DIR / f"dynamodb-local{worker_suffix()}.log")
    except LocalEngineError as exc:
        local_engine_unavailable(exc)
    yield engine
    engine.stop()


def _pool_client(region: str, endpoint_url: str | None):
    """The pool's own client: no fault hooks or metrics, whatever a test configured."""
    return boto3.session.Session().client(
        "dynamodb",
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@pytest.fixture(scope="session")
def local_tables(dynamodb_local) -> TablePool:
    from django.conf import settings

    return TablePool(_pool_client(settings.AWS_REGION, dynamodb_local.endpoint_url))


@pytest.fixture(scope="session")
def moto_tables() -> TablePool:
    from django.conf import settings

    return TablePool(_pool_client(settings.AWS_REGION, None))


@pytest.fixture(scope="session")
def dynamodb_local_second() -> Iterator[LocalEngine]:
    """A second DynamoDB Local for the session: the second region of ``two_regions``."""
    try:
        engine = start_dynamodb_local(
            log_path=OUTPUT_DIR / f"dynamodb-local-2{worker_suffix()}.log"
        )
    except LocalEngineError as exc:
        local_engine_unavailable(exc)
    yield engine
    engine.stop()


@pytest.fixture
def two_regions(dynamodb_local, dynamodb_local_second, settings) -> Iterator[TableNames]:
    """Two regions, ``us-east-1`` (primary: its keys are untagged) and ``eu-west-1``, each
    on its own DynamoDB Local with fresh tables (no replication between them: each holds
    only what was written there)."""
    names = TableNames.from_prefix(f"r{uuid.uuid4().hex[:8]}-")
    settings.DDB_TABLE_PREFIX = names.idempotency_keys.removesuffix("idempotency_keys")
    settings.DYNAMODB_ENDPOINT_URL = None
    settings.FAULT_INJECTION = ""
    settings.DDB_REGIONS = (
        f"us-east-1={dynamodb_local.endpoint_url},eu-west-1={dynamodb_local_second.endpoint_url}"
    )
    # Named, not listed first: the untagged region is the primary (the smallest name,
    # eu-west-1, by default), and these tests expect us-east-1's keys untagged.
    settings.DDB_PRIMARY_REGION = "us-east-1"
    faults.set_plan(None)
    reset_clients()
    for region in regions():
        ensure_tables(dynamodb_client(region), names)
    yield names
    faults.set_plan(None)
    for region in regions():
        drop_tables(dynamodb_client(region), names)
    reset_clients()


@pytest.fixture
def ddb(request: pytest.FixtureRequest, settings) -> Iterator[Engine]:
    """Empty tables with a prefix of their own on the requested engine: a pooled set
    (tests/table_pool.py), or with ``@pytest.mark.fresh_tables`` a set made for the test.

    moto keeps its tables between tests (``start(reset=False)``, ``stop(remove_data=
    False)``) so the pool works there too; the mock itself is on only during the test."""
    fresh = request.node.get_closest_marker("fresh_tables") is not None
    if request.param == "moto":
        from moto import mock_aws

        mock = mock_aws()
        mock.start(reset=False)
        try:
            pool = request.getfixturevalue("moto_tables")
            yield from _engine_tables("moto", pool, None, settings, fresh=fresh)
        finally:
            mock.stop(remove_data=False)
    else:
        local = request.getfixturevalue("dynamodb_local")
        pool = request.getfixturevalue("local_tables")
        yield from _engine_tables("dynamodb_local", pool, local.endpoint_url, settings, fresh=fresh)
    faults.set_plan(None)


def _engine_tables(
    name: str, pool: TablePool, endpoint_url: str | None, settings, *, fresh: bool
) -> Iterator[Engine]:
    settings.DDB_REGIONS = ""
    settings.FAULT_INJECTION = ""
    settings.DYNAMODB_ENDPOINT_URL = endpoint_url
    faults.set_plan(None)
    reset_clients()
    client = dynamodb_client()
    if fresh:
        names = unique_names()
        ensure_tables(client, names)
    else:
        names = pool.acquire(client)
    settings.DDB_TABLE_PREFIX = names.idempotency_keys.removesuffix("idempotency_keys")
    try:
        yield Engine(name, client, names, endpoint_url)
    finally:
        faults.set_plan(None)
        if fresh:
            drop_tables(pool.client, names)
        else:
            pool.release(names)
        reset_clients()


@pytest.fixture
def subprocess_database_url(tmp_path) -> Iterator[str]:
    """The ``DATABASE_URL`` for the processes this test starts (gunicorn, ``manage.py``,
    ``make run``): a fresh SQLite file in its folder, or under ``make test-postgres`` a
    fresh database on the run's cluster, dropped afterwards. Asking for it also puts the
    test in ``make test-postgres``."""
    url = databases.subprocess_database_url(tmp_path)
    yield url
    databases.drop_subprocess_database(url)


class ApiCaller:
    """Posts pledges through the real HTTP API with a tenant's bearer token."""

    def __init__(self, client, token: str, tenant: str):
        self.client = client
        self.token = token
        self.tenant = tenant

    def post(self, key: str | None, body, **headers):
        import json

        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        extra = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}
        if key is not None:
            extra["HTTP_IDEMPOTENCY_KEY"] = key
        extra.update(headers)
        return self.client.post(
            "/api/v1/pledges", data=data, content_type="application/json", **extra
        )

    def get(self, key: str):
        from urllib.parse import quote

        return self.client.get(
            f"/api/v1/pledges/{quote(key, safe='')}",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
        )


@pytest.fixture
def api(db, client) -> ApiCaller:
    from dashboard.tenancy.models import ApiToken

    _, raw = ApiToken.issue("acme")
    return ApiCaller(client, raw, "acme")


def pledge_body(**overrides) -> dict:
    body = {"donor_ref": "D-1001", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}
    body.update(overrides)
    return body


@pytest.fixture
def celery_results_kept():
    """Inline tasks' results kept in the result backend, where a page that polls a task
    by its id looks, as a worker's are."""
    from dashboard.celery import app

    # Each task copies the setting when it is first bound: a task bound before this test
    # (any earlier test that ran it) keeps the value it copied, so set it on the tasks.
    app.loader.import_default_modules()
    tasks = [t for name, t in app.tasks.items() if not name.startswith("celery.")]
    before = [(t, t.store_eager_result) for t in tasks]
    for task in tasks:
        task.store_eager_result = True
    yield
    for task, value in before:
        task.store_eager_result = value


@pytest.fixture(autouse=True)
def celery_eager():
    """Tasks run inline in tests unless a test starts real worker processes."""
    from dashboard.celery import app

    before = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = before
    leaked = celery_app_leaked(app)
    if leaked:
        pytest.fail(leaked)


def celery_app_leaked(app) -> str | None:
    """Whether a test left another Celery app current, and if so put ``app`` back. The
    services reach tasks through ``current_app`` (reconciliation/casework/retries.py): a
    ``Celery(...)`` built with the default ``set_as_current=True`` would make every later
    test publish to that app's broker instead of running its tasks inline."""
    from celery import current_app

    current = current_app._get_current_object()
    if current is app:
        return None
    app.set_current()
    return (
        f"the test left Celery app {current.main!r} current instead of {app.main!r}: "
        "build helper apps with set_as_current=False"
    )


@pytest.fixture
def midday():
    """The clock at today's 12:00 UTC for the test: tests that reason about yesterday's
    and today's audit periods must not depend on the hour they happen to run at (just
    after midnight, yesterday's last period is not yet due for its checkpoint)."""
    from datetime import UTC, datetime, time

    from reconciliation import clock

    now = clock.now()
    noon = datetime.combine(now.date(), time(12), tzinfo=UTC)
    with clock.travel((noon - now).total_seconds()):
        yield


def staff_actor(username: str = "ada", role: str = "finance_staff"):
    from reconciliation.actors import Actor, Role

    return Actor(
        username=username, role=Role(role), email=f"{username}@example.org", address="10.0.0.7"
    )


@pytest.fixture
def staff_client(db):
    """A client signed in as ``finance_staff``, a user of that role."""
    from tests.helpers import client_as

    return client_as("finance_staff")


@pytest.fixture
def supervisor_client(db):
    """A client signed in as ``supervisor``, with its second factor passed."""
    from tests.helpers import client_as

    return client_as("supervisor")


@pytest.fixture
def auditor_client(db):
    """A client signed in as ``auditor``, with its second factor passed."""
    from tests.helpers import client_as

    return client_as("auditor")


@pytest.fixture(autouse=True)
def signin_lockout_isolated(settings):
    """Each test counts sign-in attempts under keys of its own (dashboard/accounts/lockout.py):
    Redis outlives the test, and a counter left by another test must not lock anyone."""
    import uuid

    settings.SIGNIN_LOCKOUT_PREFIX = f"signin-lockout:test:{uuid.uuid4().hex}:"


@pytest.fixture(autouse=True)
def intake_rate_limit_isolated(settings):
    """Each test's tenants have buckets of their own (dashboard/api/intake_limit.py): Redis
    outlives the test, and a bucket another test emptied must not refuse anyone."""
    import uuid

    settings.INTAKE_RATE_LIMIT_PREFIX = f"intake-rate:test:{uuid.uuid4().hex}:"


@pytest.fixture(autouse=True)
def request_log_buffer_isolated():
    """Each test has an intake request log buffer of its own with no flusher thread
    (reconciliation/claims/request_log_buffer.py): a test writes the buffered entries when
    it looks (``request_log_flush``), and what is left is dropped with the test, never
    written later into tables the pool hands the next one."""
    from reconciliation.claims.request_log_buffer import RequestLogBuffer, request_log_buffered

    with request_log_buffered(RequestLogBuffer(capacity=10_000, interval_s=0)) as buffer:
        yield buffer
