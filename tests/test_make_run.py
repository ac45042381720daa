"""``make run``'s process set: gunicorn serves the login page, a healthy ``/healthz`` and
the static files (whitenoise) to 32 concurrent clients without a reset, and Ctrl-C or
SIGTERM leaves no process behind."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciliation.dynamo.local import free_port
from tests.processes import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _session_processes(sid: int) -> list[str]:
    out = subprocess.run(["ps", "-e", "-o", "sid=,pid=,args="], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.split()[0] == str(sid)]


def _descendants_running(root: int, needle: str) -> list[str]:
    """Command lines containing ``needle`` of processes descending from ``root`` (honcho
    starts each process in a session of its own)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,args="], capture_output=True, text=True)
    rows = [line.split(None, 2) for line in out.stdout.splitlines() if line.strip()]
    parent = {int(r[0]): int(r[1]) for r in rows}
    found = []
    for pid, _ppid, *args in rows:
        n = int(pid)
        while n > 1 and n != root:
            n = parent.get(n, 1)
        if n == root and args and needle in args[0]:
            found.append(args[0])
    return found


def _concurrent_clients(port: int, clients: int, rounds: int) -> tuple[list, list]:
    """``clients`` threads released together, each making ``rounds`` requests on fresh
    connections; the statuses seen and every error raised (a reset among them)."""
    paths = ("/accounts/login/", "/healthz", "/static/css/app.css")
    barrier = threading.Barrier(clients)
    statuses: list[int] = []
    errors: list[BaseException] = []

    def client(n: int) -> None:
        barrier.wait()
        for r in range(rounds):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request("GET", paths[(n + r) % len(paths)])
                response = conn.getresponse()
                response.read()
                statuses.append(response.status)
            except (OSError, http.client.HTTPException) as exc:
                errors.append(exc)
            finally:
                conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return statuses, errors


def _start_run(tmp_path, web_port: int, database_url: str, **settings: str) -> subprocess.Popen:
    """bin/run.py as `make run` starts it, on its own ports, folder and database, with no
    demo data and none of this process's DynamoDB endpoint or regions: it starts its own
    engines. Its output goes to ``run.log`` in ``tmp_path`` (``_output``): a pipe nobody
    reads while the test waits would fill and stop every process that writes to it."""
    env = dict(
        os.environ,
        WEB_PORT=str(web_port),
        VAR_DIR=str(tmp_path),
        DATABASE_URL=database_url,
        REDBEAT_KEY_PREFIX=f"redbeat:test-{web_port}:",
        DEMO_SEED="0",
        **settings,
    )
    for name in ("DYNAMODB_ENDPOINT_URL", "DDB_REGIONS", "DDB_PRIMARY_REGION", "AWS_REGION"):
        env.pop(name, None)
    with open(tmp_path / "run.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "bin/run.py"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _output(tmp_path) -> str:
    return (tmp_path / "run.log").read_text(errors="replace")


def _json_or_none(url: str) -> dict | None:
    try:
        status, body = _get(url)
        return json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return None


def _healthz(base: str) -> tuple[int, dict] | None:
    """/healthz's status and body, or ``None`` while nothing answers yet."""
    try:
        status, body = _get(base + "/healthz")
        return status, json.loads(body)
    except (OSError, ValueError):
        return None


def _wait_while_running(proc: subprocess.Popen, tmp_path, predicate, *, timeout: float, what: str):
    """Wait for ``predicate``, failing at once (with its output) if bin/run.py exits."""

    def ready():
        assert proc.poll() is None, _output(tmp_path)
        return predicate()

    return wait_for(ready, timeout=timeout, interval=0.5, what=what)


def _stop(proc: subprocess.Popen, how: str) -> None:
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
    else:
        os.kill(proc.pid, signal.SIGTERM)  # a service manager stops bin/run.py alone


# Generous but bounded: on two loaded cores the process set takes a minute or more to
# come up (collectstatic, DynamoDB Local, gunicorn, worker and beat all start at once).
@pytest.mark.long
@pytest.mark.timeout(600)
@pytest.mark.dynamodb_local_only
def test_make_run_serves_and_ctrl_c_stops_everything(
    tmp_path, dynamodb_local, subprocess_database_url
):
    """bin/run.py (what `make run` calls) comes up under gunicorn, serves 32 concurrent
    clients and the collected static files, and stops cleanly on Ctrl-C. (SIGTERM, the
    way a service manager stops it, is the two-region test's stop: one start of the
    whole process set fewer.) Under `make test-postgres` its database is PostgreSQL."""
    web_port, ddb_port = free_port(), free_port()
    proc = _start_run(tmp_path, web_port, subprocess_database_url, DDB_LOCAL_PORT=str(ddb_port))
    base = f"http://127.0.0.1:{web_port}"
    try:
        health = _wait_while_running(
            proc,
            tmp_path,
            lambda: (answer := _healthz(base)) and answer[0] == 200 and answer,
            timeout=300,
            what="/healthz to answer 200",
        )
        assert health == (200, {"dynamodb": "ok", "redis": "ok", "config": "ok"})
        status, body = _get(base + "/accounts/login/")
        assert status == 200 and b"Sign in" in body
        assert len(_session_processes(proc.pid)) >= 4  # run.py, honcho, web, worker, beat
        # The acknowledgement dispatcher and the development receiver run too; the
        # receiver answers where start-up said it listens.
        _wait_while_running(
            proc,
            tmp_path,
            lambda: (
                _descendants_running(proc.pid, "dispatch_acks")
                and _descendants_running(proc.pid, "webhook_sink")
            ),
            timeout=60,
            what="the dispatcher and the receiver",
        )
        sink = re.search(r"webhook sink listens on (http://127\.0\.0\.1:\d+/)", _output(tmp_path))
        assert sink, _output(tmp_path)
        sink_stats = _wait_while_running(
            proc,
            tmp_path,
            lambda: (answer := _json_or_none(sink.group(1) + "stats")) is not None and answer,
            timeout=60,
            what="the receiver's /stats",
        )
        assert sink_stats["rejected"] == 0

        # gunicorn, not runserver (which reset connections under 32 concurrent clients).
        with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
            assert resp.headers["Server"].startswith("gunicorn")
        statuses, errors = _concurrent_clients(web_port, clients=32, rounds=4)
        assert errors == [] and statuses == [200] * 128

        # whitenoise serves the collected, pre-compressed copy from STATIC_ROOT.
        assert (tmp_path / "staticfiles" / "css" / "app.css.gz").exists()
        plain = urllib.request.urlopen(base + "/static/css/app.css", timeout=5)
        assert plain.status == 200 and plain.headers["Content-Type"].startswith("text/css")
        assert plain.read() == (ROOT / "static" / "css" / "app.css").read_bytes()
        gzip_request = urllib.request.Request(
            base + "/static/css/app.css", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(gzip_request, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
    finally:
        _stop(proc, "ctrl-c")
        proc.wait(timeout=60)
    output = _output(tmp_path)
    assert "demo users (passwords are shown this once" in output
    assert "sign in at http://127.0.0.1:" in output and "no second factor" in output
    # Asked to stop, it stopped: `make run` ends without `make: *** Error 130`.
    assert proc.returncode == 0, output
    # DynamoDB Local kept its data on disk under var/, beside the Django database.
    assert (tmp_path / "dynamodb" / "shared-local-instance.db").exists()
    assert _session_processes(proc.pid) == []
    for port in (web_port, ddb_port):
        with pytest.raises(OSError):
            _get(f"http://127.0.0.1:{port}/")


@pytest.mark.long
@pytest.mark.timeout(600)
@pytest.mark.dynamodb_local_only
def test_make_run_with_two_regions_brings_up_the_stand_in(tmp_path, dynamodb_local):
    """``RUN_REGIONS=2``: a second DynamoDB Local as eu-west-1, both regions' tables
    with streams, the Global Tables stand-in running between them; SIGTERM stops all."""
    import boto3

    web_port, ddb_port, ddb_port2 = free_port(), free_port(), free_port()
    proc = _start_run(
        tmp_path,
        web_port,
        # SQLite under `make test-postgres` too: the one-region test covers the database.
        f"sqlite:///{tmp_path / 'db.sqlite3'}",
        RUN_REGIONS="2",
        DDB_LOCAL_PORT=str(ddb_port),
        DDB_LOCAL_PORT2=str(ddb_port2),
    )
    base = f"http://127.0.0.1:{web_port}"
    try:
        stand_in: list[str] = []

        def up() -> bool:
            stand_in[:] = _descendants_running(proc.pid, "replicate_regions")
            return bool(stand_in) and (_healthz(base) or (0,))[0] == 200

        with contextlib.suppress(AssertionError):  # reported below, with the output
            _wait_while_running(proc, tmp_path, up, timeout=360, what="the stand-in")
        if not stand_in:
            _stop(proc, "sigterm")
            proc.wait(timeout=60)
            raise AssertionError(f"the stand-in is not running:\n{_output(tmp_path)}")
        for port in (ddb_port, ddb_port2):
            client = boto3.client(
                "dynamodb",
                endpoint_url=f"http://127.0.0.1:{port}",
                region_name="us-east-1",
                aws_access_key_id="local",
                aws_secret_access_key="local",
            )
            table = client.describe_table(TableName="pledges-pledges")["Table"]
            assert table["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    finally:
        _stop(proc, "sigterm")
        proc.wait(timeout=60)
    output = _output(tmp_path)
    assert "two regions: us-east-1=" in output and "replicate_regions: 12 streams" in output
    # Asked to stop by a service manager (SIGTERM to bin/run.py alone), it stopped
    # everything it started, both engines included, and exited 0.
    assert proc.returncode == 0, output
    assert _session_processes(proc.pid) == []
    for port in (web_port, ddb_port, ddb_port2):
        with pytest.raises(OSError):
            _get(f"http://127.0.0.1:{port}/")


@pytest.mark.long
@pytest.mark.dynamodb_local_only
def test_dynamodb_local_on_disk_keeps_its_data_across_a_restart(tmp_path, dynamodb_local):
    """The engine `make run` starts keeps what it acknowledged in its data folder: stopped
    and started again on that folder, it still answers for the item (in memory it would
    answer nothing, and the API 404 for a pledge it acknowledged)."""
    import boto3

    from reconciliation.dynamo import local

    def client(engine: local.LocalEngine):
        return boto3.client(
            "dynamodb",
            endpoint_url=engine.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )

    engine = local.start_best_engine(db_path=tmp_path / "dynamodb")
    try:
        assert engine.kind == "dynamodb_local"
        first = client(engine)
        first.create_table(
            TableName="kept",
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        first.put_item(TableName="kept", Item={"k": {"S": "pledge-1"}})
    finally:
        engine.stop()
    engine = local.start_best_engine(db_path=tmp_path / "dynamodb")
    try:
        item = client(engine).get_item(TableName="kept", Key={"k": {"S": "pledge-1"}})
        assert item.get("Item") == {"k": {"S": "pledge-1"}}
    finally:
        engine.stop()


# --- what bin/run.py decides before anything runs ---------------------------------------


def _run_module():
    """bin/run.py as a module (``bin/`` is no package): its pure parts, without running."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_run", ROOT / "bin" / "run.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_url_follows_the_web_port_unless_set():
    """Links in e-mails point at the port this run serves, unless SITE_URL says where."""
    run = _run_module()
    assert run.site_url({}, 8700) == "http://127.0.0.1:8700"
    assert run.site_url({"SITE_URL": "https://pledges.example.org"}, 8700) == (
        "https://pledges.example.org"
    )


def test_reset_deletes_the_dynamodb_data_and_the_sqlite_database_together(tmp_path):
    """RESET=1 deletes both regions' DynamoDB Local folders and the SQLite database (with
    its journal files), and nothing else under var/."""
    run = _run_module()
    for folder in (run.dynamodb_data_dir(tmp_path, 1), run.dynamodb_data_dir(tmp_path, 2)):
        folder.mkdir()
        (folder / "shared-local-instance.db").write_bytes(b"x")
    (tmp_path / "db.sqlite3").write_bytes(b"x")
    (tmp_path / "db.sqlite3-wal").write_bytes(b"x")
    (tmp_path / "secret_key").write_text("kept")
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}

    assert run.reset_problem(env, tmp_path) is None
    gone = run.reset(env, tmp_path)

    assert sorted(p.name for p in gone) == [
        "db.sqlite3",
        "db.sqlite3-wal",
        "dynamodb",
        "dynamodb-2",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"]


def test_reset_refuses_data_make_run_does_not_keep(tmp_path):
    """RESET=1 with an engine or a database `make run` did not start deletes nothing:
    half a reset would leave cases pointing at users, or users at no cases."""
    run = _run_module()
    assert "DYNAMODB_ENDPOINT_URL" in run.reset_problem(
        {"DYNAMODB_ENDPOINT_URL": "http://127.0.0.1:9"}, tmp_path
    )
    assert "DATABASE_URL" in run.reset_problem(
        {"DATABASE_URL": "postgres://127.0.0.1/pledges"}, tmp_path
    )
    # The settings' default: the SQLite file under var/.
    assert run.sqlite_file({}, tmp_path) == tmp_path / "db.sqlite3"


def test_start_up_says_whom_to_sign_in_as_and_that_demo_mode_skips_the_second_factor():
    """The lines printed before `web on …` name the demo users to sign in as, where, and
    whether a second factor is asked (as the settings decide it)."""
    run = _run_module()
    debug = "\n".join(run.sign_in_lines({"DJANGO_DEBUG": "1"}, 8700))
    assert "http://127.0.0.1:8700/accounts/login/" in debug
    for user, _role, _email in run.DEMO_USERS:
        if user[-1] != "2":  # the second staff and supervisor are for four-eyes steps
            assert f"`{user}`" in debug, user
    assert "no second factor" in debug
    required = "\n".join(run.sign_in_lines({"DJANGO_DEBUG": "1", "STAFF_MFA_REQUIRED": "1"}, 8700))
    assert "no second factor" not in required and "authenticator" in required
    assert not run.second_factor_skipped({"DJANGO_DEBUG": "0"})


@pytest.mark.engines("moto")
@pytest.mark.django_db
def test_demo_tenants_get_every_demo_fund_and_keep_what_was_changed(ddb, settings):
    """The README's tenant `acme`, first created with GENERAL USD only (as
    `make manage ARGS="issue_api_token --tenant acme"` did), is given every demo fund by
    `make run`; a limit someone changed stays, and a second run registers nothing."""
    from decimal import Decimal

    from dashboard.tenancy.management.commands.issue_api_token import command_actor
    from dashboard.tenancy.models import Fund, default_funds
    from dashboard.tenancy.tenant_changes import tenant_funds_complete, tenant_provision

    run = _run_module()
    actor = command_actor("test")
    settings.DEFAULT_FUNDS = "GENERAL"
    acme = tenant_provision("acme", actor=actor)
    Fund.objects.filter(tenant=acme).update(max_amount=Decimal("5"))
    settings.DEFAULT_FUNDS = run.DEMO_FUNDS

    added = tenant_funds_complete("acme", default_funds(), actor=actor)

    have = set(Fund.objects.filter(tenant=acme).values_list("code", "currency"))
    assert have == {tuple(spec.split(":")) for spec in run.DEMO_FUNDS.split(",")}
    assert len(added) == len(have) - 1
    assert Fund.objects.get(tenant=acme, code="GENERAL", currency="USD").max_amount == 5
    assert tenant_funds_complete("acme", default_funds(), actor=actor) == []


def test_the_receiver_keeps_its_port_unless_taken_or_configured(tmp_path):
    """The development receiver listens where the last run registered it (the port is
    kept under var/), on a free port when that one is taken, or on WEBHOOK_SINK_PORT."""
    run = _run_module()
    free = iter([9101, 9102])
    assert run.sink_port({}, tmp_path, lambda p: False, lambda: next(free)) == 9101
    assert run.sink_port({}, tmp_path, lambda p: False, lambda: next(free)) == 9101
    assert run.sink_port({}, tmp_path, lambda p: p == 9101, lambda: next(free)) == 9102
    assert run.sink_port({"WEBHOOK_SINK_PORT": "9200"}, tmp_path, bool, lambda: 1) == 9200
    assert run.sink_url(9102) == "http://127.0.0.1:9102/"


def test_the_procfile_runs_the_dispatcher_and_make_run_adds_the_receiver(tmp_path):
    """The project's Procfile runs ``dispatch_acks`` in the foreground (restarted if it
    ends); `make run` adds the receiver, reading its secret from var/ (not in `ps`)."""
    run = _run_module()
    base = (ROOT / "Procfile").read_text()
    assert re.search(r"^acks: .*manage\.py dispatch_acks$", base, re.M)
    text = run.procfile_text(base, sink_port=9101, secret_file=tmp_path / "s", lag_ms=None)
    assert text.startswith(base)
    sink = f"sink: python manage.py webhook_sink --port 9101 --secret-file {tmp_path / 's'}"
    assert sink in text.splitlines() and "replicator" not in text
    two = run.procfile_text(base, sink_port=9101, secret_file=tmp_path / "s", lag_ms="500")
    assert "replicator: python manage.py replicate_regions --lag-ms 500" in two


@pytest.mark.engines("moto")
@pytest.mark.django_db
def test_the_receiver_is_registered_for_the_demo_tenants_once(ddb, tmp_path):
    """`make run`'s registration script registers the receiver for the demo data's tenant
    and for ``acme``, the tenant docs/api.md's curl lines post as (a pledge recorded by
    hand got no acknowledgement before), with one secret kept under var/; run again (a
    restart) it registers nothing new, and after RESET=1 (the database gone, the secret
    file kept) it registers again."""
    from dashboard.tenancy.models import WebhookEndpoint
    from reconciliation.actors import command_actor
    from reconciliation.simulation.simulate import TENANT

    run = _run_module()
    assert set(run.SINK_TENANTS) == {TENANT, "acme"}
    secret_file = tmp_path / run.SINK_SECRET_FILE
    script = run.sink_keep_script("http://127.0.0.1:9101/", secret_file)

    def once() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(script, {"actor": command_actor("test")})
        return out.getvalue().strip()

    def registered() -> dict[str, tuple[str, str]]:
        return {
            row.tenant.name: (row.url, row.secret)
            for row in WebhookEndpoint.objects.select_related("tenant")
        }

    assert once() == "sink registered"
    secret = secret_file.read_text().strip()
    url = "http://127.0.0.1:9101/"
    assert registered() == {TENANT: (url, secret), "acme": (url, secret)}
    assert secret_file.stat().st_mode & 0o077 == 0
    assert once() == "sink kept"
    assert registered() == {TENANT: (url, secret), "acme": (url, secret)}
    WebhookEndpoint.objects.all().delete()
    assert once() == "sink registered"
    assert registered() == {TENANT: (url, secret), "acme": (url, secret)}


def test_a_terminals_ctrl_c_ends_make_run_with_0_not_130(tmp_path):
    """A terminal's Ctrl-C goes to its foreground process group: make and the launcher
    that make runs. make, interrupted, ends 130 whatever the launcher does, unless the
    launcher took the terminal's foreground for its own group first. Reproduced with a
    real terminal (a pty) and a real make, the launcher's own terminal step the only
    difference."""
    import fcntl
    import pty
    import termios

    run_py = ROOT / "bin" / "run.py"

    def run_under_make(take: bool) -> int:
        script = tmp_path / f"launcher-{take}.py"
        script.write_text(
            "import importlib.util, signal, sys, time\n"
            f"spec = importlib.util.spec_from_file_location('run', {str(run_py)!r})\n"
            "run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)\n"
            f"taken = run.terminal_take() if {take} else None\n"
            "try:\n"
            "    print('ready', flush=True); time.sleep(120); sys.exit(3)\n"
            "except KeyboardInterrupt:\n"
            "    run.terminal_give_back(taken); sys.exit(0)\n"
        )
        makefile = tmp_path / f"Makefile-{take}"
        makefile.write_text(f"run:\n\texec {sys.executable} {script}\n")
        master, slave = pty.openpty()

        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        proc = subprocess.Popen(
            ["make", "--no-print-directory", "-f", str(makefile), "run"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=controlling_terminal,
            close_fds=True,
        )
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 30
        while b"ready" not in seen and time.monotonic() < deadline:
            seen += os.read(master, 1024)
        assert b"ready" in seen, seen
        os.write(master, b"\x03")  # the terminal's Ctrl-C
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            # Nothing ended: a full run beside a bench once saw the first keystroke
            # reach nobody. A person presses again; so does this test.
            os.write(master, b"\x03")
            code = proc.wait(timeout=30)
        os.close(master)
        return code

    assert run_under_make(take=False) != 0  # make itself was interrupted
    assert run_under_make(take=True) == 0


def test_a_start_stopped_while_seeding_starts_clean_next_time(tmp_path):
    """Ctrl-C during the first seeding left part of the demo data and no mark that it
    was seeded: the next start would seed again on top. It starts clean instead."""
    run = _run_module()
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    data = run.dynamodb_data_dir(tmp_path, 1)
    data.mkdir()
    (data / "shared-local-instance.db").write_bytes(b"half a seed")
    (tmp_path / "db.sqlite3").write_bytes(b"users")
    (data / run.DEMO_SEEDING_MARK).write_text("started")

    gone = run.seed_interrupted_reset(env, tmp_path)

    assert data in gone and tmp_path / "db.sqlite3" in gone
    assert not data.exists() and not (tmp_path / "db.sqlite3").exists()

    # Seeded to the end: kept, whatever marks it holds.
    data.mkdir()
    (data / "shared-local-instance.db").write_bytes(b"a whole seed")
    (data / run.DEMO_SEEDING_MARK).write_text("started")
    (data / run.DEMO_SEEDED_MARK).write_text("done")
    assert run.seed_interrupted_reset(env, tmp_path) == []
    assert (data / "shared-local-instance.db").exists()


def test_a_start_stopped_while_seeding_into_a_database_it_does_not_keep_stops(tmp_path, capsys):
    """With DATABASE_URL naming PostgreSQL, `make run` cannot start clean (it deletes
    only data it keeps, both halves or neither), and seeding again would add a second
    set on top of half a first: the start stops and says what to clear, deleting
    nothing."""
    run = _run_module()
    env = {"DATABASE_URL": "postgres://127.0.0.1/pledges"}
    data = run.dynamodb_data_dir(tmp_path, 1)
    data.mkdir()
    (data / "shared-local-instance.db").write_bytes(b"half a seed")
    (data / run.DEMO_SEEDING_MARK).write_text("started")

    with pytest.raises(SystemExit) as stopped:
        run.start_clean(env, tmp_path)

    assert stopped.value.code == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("[make run] ERROR: the last start was stopped while it seeded")
    assert "DATABASE_URL" in error and str(data) in error and "\n" not in error
    assert (data / "shared-local-instance.db").exists()


def test_a_failed_step_names_the_check_that_failed():
    """`manage.py migrate` refused by a system check: the one line make run prints names
    the check and what it says, not only that migrate failed."""
    run = _run_module()
    output = (
        "SystemCheckError: System check identified some issues:\n\nERRORS:\n"
        "?: (reconciliation.E004) configuration differs from the one recorded in "
        "us-east-1: regions\n\tHINT: Make this process's settings match.\n"
    )
    assert run.failure_reason(output) == (
        "reconciliation.E004: configuration differs from the one recorded in us-east-1: regions"
    )
    assert run.failure_reason("CommandError: the table is gone\n") == "the table is gone"
    assert run.failure_reason("") == ""


@pytest.mark.dynamodb_local_only
def test_a_changed_configuration_on_make_runs_own_data_is_accepted_and_audited(
    tmp_path, dynamodb_local
):
    """Data of an earlier run with another configuration (here more ledger shards, as
    with RUN_REGIONS=2 another region list): the system check would refuse every
    process. make run owns that data: in demo mode it accepts the configuration (an
    audited ``config_accepted``) and goes on; elsewhere it stops and says what to do."""
    run = _run_module()
    env = dict(
        os.environ,
        DYNAMODB_ENDPOINT_URL=dynamodb_local.endpoint_url,
        DDB_TABLE_PREFIX=f"mr{os.getpid()}-",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DEMO_MODE="1",
        LEDGER_SHARDS="8",
    )
    for name in ("DDB_REGIONS", "DDB_PRIMARY_REGION"):
        env.pop(name, None)
    run.dynamodb_setup(env, owned=True)
    changed = dict(env, LEDGER_SHARDS="16")

    with pytest.raises(SystemExit):
        run.dynamodb_setup(dict(changed, DEMO_MODE="0"), owned=True)
    with pytest.raises(SystemExit):
        run.dynamodb_setup(changed, owned=False)  # not make run's data to accept for
    accepted = run.dynamodb_setup(changed, owned=True)

    assert "configuration accepted" in accepted
    check = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=changed,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    exported = tmp_path / "audit.jsonl"
    events = subprocess.run(
        [sys.executable, "manage.py", "export_audit", "--since", f"{datetime.now(UTC):%Y-%m-%d}"]
        + ["--format", "jsonl", "--out", str(exported)],
        cwd=ROOT,
        env=changed,
        capture_output=True,
        text=True,
    )
    assert events.returncode == 0, events.stdout + events.stderr
    actions = [json.loads(line)["action"] for line in exported.read_text().splitlines()]
    assert actions.count("config_accepted") == 1, actions
