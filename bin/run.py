#!/usr/bin/env python
"""``make run``: bring the whole system up on this machine until Ctrl-C.

Starts DynamoDB Local (or says why it cannot and falls back to moto, loudly), makes sure
Redis answers (starting ``redis-server`` if it is installed and nothing listens),
migrates Django's own database, creates the DynamoDB tables, creates the demo users,
seeds demo data, collects static files, then runs web (gunicorn, as in production) +
worker + beat + the acknowledgement dispatcher under honcho, with a development webhook
receiver (``webhook_sink``) registered for the demo tenant (docs/webhooks.md). Ctrl-C
or SIGTERM stops everything it started, and it exits 0.

DynamoDB Local keeps its data on disk under ``var/dynamodb/`` (``-dbPath``), beside the
SQLite database under ``var/`` that holds users, tenants and tokens: a restart finds the
pledges, cases and audit events it acknowledged before, and seeds the demo data only once.
``RESET=1`` (``make run RESET=1``) deletes both before starting, and starts clean.

``RUN_REGIONS=2 make run`` brings up two regions instead (docs/regions.md): a second
DynamoDB Local on ``DDB_LOCAL_PORT2`` as ``eu-west-1`` beside ``us-east-1``, and the
Global Tables stand-in (``replicate_regions``, lag ``REPLICATION_LAG_MS``) between them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reconciliation.dynamo import local  # noqa: E402

PYTHON = sys.executable
DEMO_USERS = (
    ("staff", "finance_staff", "staff@example.org"),
    ("staff2", "finance_staff", "staff2@example.org"),
    ("supervisor", "supervisor", "supervisor@example.org"),
    # A second supervisor: a supervisor's own override request needs another to approve.
    ("supervisor2", "supervisor", "supervisor2@example.org"),
    ("auditor", "auditor", "auditor@example.org"),
    # Also a superuser: the administration screen at /admin/.
    ("admin", "supervisor", "admin@example.org"),
)
DEMO_SUPERUSERS = ("admin",)
# The demo's tenants (the simulator's ``sim``, docs/api.md's ``acme``) start with every fund
# and currency the simulator pledges to (settings.DEFAULT_FUNDS).
DEMO_FUNDS = ",".join(
    f"{fund}:{currency}"
    for fund in ("GENERAL", "BUILDING", "SCHOLARSHIP", "RELIEF")
    for currency in ("USD", "EUR", "GBP")
)


# Inside the first engine's data folder, so that the mark and the data it speaks of are
# kept and deleted together: the demo data is seeded once per folder, never twice.
DEMO_SEEDED_MARK = "demo-seeded"
# Written before the seeding starts: with it and without the mark above, a start was
# stopped while seeding, and seeding again would add a second set on top of half a first.
DEMO_SEEDING_MARK = "demo-seeding"


def say(message: str) -> None:
    print(f"[make run] {message}", flush=True)


def fail(message: str) -> None:
    print(f"[make run] ERROR: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def redis_ping(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def ensure_redis(env: dict) -> subprocess.Popen | None:
    url = env["REDIS_URL"]
    if redis_ping(url):
        say(f"Redis answers at {url}")
        return None
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    server = shutil.which("redis-server")
    if host not in ("127.0.0.1", "localhost") or not server or port_answers(host, port):
        fail(
            f"Redis is not answering at {url}. Start one (Debian: apt-get install "
            "redis-server && redis-server --daemonize yes) or set REDIS_URL."
        )
    say(f"starting redis-server on {host}:{port}")
    proc = subprocess.Popen(
        [server, "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    for _ in range(50):
        if redis_ping(url):
            return proc
        time.sleep(0.1)
    proc.terminate()
    fail(f"redis-server did not answer at {url}")
    return None


def manage(env: dict, *args: str, capture: bool = False, hint: str = "") -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, text=True, capture_output=capture
    )
    if result.returncode != 0:
        reason = ""
        if capture:
            sys.stderr.write(result.stdout + result.stderr)
            reason = failure_reason(result.stdout + result.stderr)
        fail(
            f"`manage.py {' '.join(args)}` failed"
            + (f": {reason}" if reason else "")
            + (f"; {hint}" if hint else "")
        )
    return result.stdout if capture else ""


# A system check's line in a command's output: ``?: (reconciliation.E004) what it says``.
CHECK_LINE = re.compile(r"\((?P<check>[\w.]+\.E\d+)\) (?P<says>.+)")


def failure_reason(output: str) -> str:
    """What a failed command said, in one line: the first system check that failed (its
    id and message), else its ``CommandError``; empty when it said neither."""
    for line in output.splitlines():
        if found := CHECK_LINE.search(line):
            return f"{found['check']}: {found['says'].strip()}"
    for line in output.splitlines():
        if line.startswith("CommandError: "):
            return line.removeprefix("CommandError: ").strip()
    return ""


def dynamodb_setup(env: dict, *, owned: bool) -> str:
    """Tables, indexes, TTL and the recorded configuration (``ddb_setup``), before any
    command that runs the system check, which refuses a configuration other than the
    recorded one. Data ``make run`` keeps itself (``owned``) is its own to accept a
    changed configuration for, in demo mode: ``--accept-config``, audited as
    ``config_accepted``. Elsewhere, or outside demo mode, a changed configuration stops
    the start, saying what to do. Returns what ``ddb_setup`` printed."""
    accept = owned and env.get("DEMO_MODE", "") == "1"
    hint = "add RESET=1 (deletes var/)" if owned else ""
    output = manage(
        env, "ddb_setup", *(["--accept-config"] if accept else []), capture=True, hint=hint
    )
    sys.stdout.write(output)
    if "configuration accepted" in output:
        say(
            "the configuration changed since make run last ran on this data: accepted "
            "(audited; `make run RESET=1` starts clean instead)"
        )
    return output


def create_demo_users(env: dict) -> None:
    from_shell = (
        "from django.contrib.auth import get_user_model;"
        "print(' '.join(get_user_model().objects.values_list('username', flat=True)))"
    )
    superusers_shell = (
        "from django.contrib.auth import get_user_model;"
        "print(' '.join(get_user_model().objects.filter(is_superuser=True)"
        ".values_list('username', flat=True)))"
    )
    existing = set(manage(env, "shell", "-c", from_shell, capture=True).split())
    superusers = set(manage(env, "shell", "-c", superusers_shell, capture=True).split())
    created = []
    for username, role, email in DEMO_USERS:
        if username in existing:
            if username in DEMO_SUPERUSERS and username not in superusers:
                # Kept from a run before it was made one: made one now, password unchanged.
                manage(env, "add_staff", username, "--role", role, "--superuser", capture=True)
            continue
        extra = ["--superuser"] if username in DEMO_SUPERUSERS else []
        out = manage(
            env, "add_staff", username, "--role", role, "--email", email, *extra, capture=True
        )
        said = [line for line in out.splitlines() if line.startswith(f"password for {username}: ")]
        password = said[0].rsplit(": ", 1)[-1] if said else "(not printed)"
        created.append((username, role, password))
    if created:
        say("demo users (passwords are shown this once; demo mode only):")
        for username, role, password in created:
            print(f"    {username:<11} {role:<14} {password}", flush=True)
    else:
        say(
            "demo users exist already: "
            + ", ".join(u for u, _, _ in DEMO_USERS)
            + " (reset one with `python manage.py add_staff NAME --role ROLE --password P`)"
        )


# The simulator's tenant and the one docs/api.md's curl lines use (README, the first five
# minutes): each with every demo fund, whether new or kept from an earlier run.
DEMO_TENANTS = ("sim", "acme")


def demo_tenants(env: dict, *, sink: str, secret_file: Path) -> None:
    """Every demo fund for the demo tenants, and the receiver's registration (one
    `manage.py shell`: each costs a Django start-up)."""
    script = (
        "from dashboard.tenancy.management.commands.issue_api_token import command_actor;"
        "from dashboard.tenancy.models import default_funds;"
        "from dashboard.tenancy.tenant_changes import tenant_funds_complete;"
        "actor = command_actor('make run');"
        f"[print(t, len(tenant_funds_complete(t, default_funds(), actor=actor))) "
        f"for t in {DEMO_TENANTS!r}]\n" + sink_keep_script(sink, secret_file)
    )
    out = manage(env, "shell", "-c", script, capture=True)
    say(
        "demo tenants "
        + ", ".join(DEMO_TENANTS)
        + f" accept the funds {env['DEFAULT_FUNDS'].replace(',', ', ')}"
    )
    registered = "sink registered" in out
    say(
        f"webhook sink listens on {sink} for the acknowledgements of tenants "
        + " and ".join(SINK_TENANTS)
        + " "
        + ("(registered now" if registered else "(registered by an earlier run")
        + f", secret in {secret_file}); its counts: {sink}stats"
    )


# The demo data's tenant (reconciliation/simulation/simulate.py · TENANT) and the one docs/api.md's
# curl lines post as: their acknowledgements go to a development receiver that `make run`
# starts and registers once for each.
SINK_TENANTS = ("sim", "acme")
# Under var/: the receiver's signing secret (so a restart finds its registration) and
# the port it last listened on.
SINK_SECRET_FILE = "webhook-sink.secret"
SINK_PORT_FILE = "webhook-sink.port"


def sink_port(env: dict, var: Path, in_use, pick) -> int:
    """The receiver's loopback port: ``WEBHOOK_SINK_PORT`` when set; else the port of the
    last run (its registration names it) unless something else listens there now; else
    a free one (``pick()``), saved for the next run."""
    configured = env.get("WEBHOOK_SINK_PORT", "").strip()
    if configured:
        return int(configured)
    saved = var / SINK_PORT_FILE
    if saved.exists():
        text = saved.read_text().strip()
        if text.isdigit() and not in_use(int(text)):
            return int(text)
    port = int(pick())
    saved.write_text(f"{port}\n")
    return port


def sink_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def sink_keep_script(url: str, secret_file: Path) -> str:
    """Python for `manage.py shell -c`: keep the receiver's registration for each demo
    tenant (dashboard/tenancy/tenant_changes.py · webhook_keep), or register it, one secret for
    all, kept under var/ (readable by this user only)."""
    return (
        "import os, pathlib\n"
        "from dashboard.tenancy.tenant_changes import webhook_keep\n"
        "from reconciliation.acks.models import DEFAULT_EVENTS\n"
        f"f = pathlib.Path({str(secret_file)!r})\n"
        "kept = f.read_text().strip() if f.exists() else ''\n"
        "registered = False\n"
        f"for tenant in {SINK_TENANTS!r}:\n"
        f"    row, new = webhook_keep(tenant, {url!r}, secret=kept, "
        "events=DEFAULT_EVENTS, actor=actor)\n"
        "    registered = registered or new\n"
        "    if row.secret != kept:\n"
        "        kept = row.secret\n"
        "        f.write_text(kept + '\\n')\n"
        "        os.chmod(f, 0o600)\n"
        "print('sink', 'registered' if registered else 'kept')\n"
    )


def procfile_text(base: str, *, sink_port: int, secret_file: Path, lag_ms: str | None) -> str:
    """The Procfile `make run` starts: the project's, the development receiver and, with
    two regions, the Global Tables stand-in."""
    text = base if base.endswith("\n") else base + "\n"
    text += f"sink: python manage.py webhook_sink --port {sink_port} --secret-file {secret_file}\n"
    if lag_ms is not None:
        text += f"replicator: python manage.py replicate_regions --lag-ms {lag_ms}\n"
    return text


def dynamodb_data_dir(var: Path, region: int = 1) -> Path:
    """Where DynamoDB Local keeps region ``region``'s data between runs."""
    return var / ("dynamodb" if region == 1 else f"dynamodb-{region}")


def sqlite_file(env: dict, var: Path) -> Path | None:
    """The SQLite file the Django database lives in (settings' default under ``var/``),
    or ``None`` when ``DATABASE_URL`` names another kind of database."""
    url = env.get("DATABASE_URL") or f"sqlite:///{var / 'db.sqlite3'}"
    if not url.startswith("sqlite:///"):
        return None
    return Path(url.removeprefix("sqlite:///"))


def reset_problem(env: dict, var: Path) -> str | None:
    """Why ``RESET=1`` cannot start clean here, or ``None``: it deletes only data that
    ``make run`` itself keeps, and both halves or neither."""
    if env.get("DYNAMODB_ENDPOINT_URL"):
        return "DYNAMODB_ENDPOINT_URL names an engine `make run` did not start; clear it yourself"
    if sqlite_file(env, var) is None:
        return "DATABASE_URL names a database that is not SQLite; clear it yourself"
    return None


def reset(env: dict, var: Path) -> list[Path]:
    """Delete DynamoDB Local's data (every region's) and the SQLite database; the paths
    deleted."""
    gone = []
    for folder in (dynamodb_data_dir(var, 1), dynamodb_data_dir(var, 2)):
        if folder.exists():
            shutil.rmtree(folder)
            gone.append(folder)
    database = sqlite_file(env, var)
    assert database is not None  # reset_problem() said so
    for path in (database, *(database.with_name(database.name + s) for s in SQLITE_SIDES)):
        if path.exists():
            path.unlink()
            gone.append(path)
    return gone


SQLITE_SIDES = ("-wal", "-shm", "-journal")


def seed_interrupted_reset(env: dict, var: Path) -> list[Path]:
    """Start clean (as ``RESET=1``) when the last start was stopped while it seeded the
    demo data: nobody used that data (web starts after the seeding). The paths deleted;
    none when the seeding ended or never began. Where ``make run`` may not start clean
    (a database it does not keep), it stops: seeding again would add a second set on
    top of half a first."""
    data = dynamodb_data_dir(var, 1)
    if not (data / DEMO_SEEDING_MARK).exists() or (data / DEMO_SEEDED_MARK).exists():
        return []
    problem = reset_problem(env, var)
    if problem:
        fail(
            f"the last start was stopped while it seeded the demo data, and {problem}, "
            f"and delete {data} (and {dynamodb_data_dir(var, 2)}), then start again"
        )
    return reset(env, var)


def terminal_take() -> tuple[int, int] | None:
    """Make this process's own group the terminal's foreground, so that a terminal's
    Ctrl-C reaches this launcher and what it starts, and not ``make``: make, interrupted,
    ends 130 ("make: *** Error 130") however cleanly everything stopped. Returns the
    terminal and the group to give it back to; ``None`` without a terminal, or when
    this process runs in the background (a foreground it does not have is not taken)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        return None
    previous = os.tcgetpgrp(fd)
    if previous != os.getpgrp():
        os.close(fd)
        return None
    os.setpgid(0, 0)
    # A background group that sets the foreground is sent SIGTTOU, which stops it.
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, os.getpgrp())
    finally:
        signal.signal(signal.SIGTTOU, old)
    return fd, previous


def terminal_give_back(taken: tuple[int, int] | None) -> None:
    """Give the terminal's foreground back to the group :func:`terminal_take` took it
    from (make's), before this process ends."""
    if taken is None:
        return
    fd, previous = taken
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, previous)
    except OSError:
        pass  # make is gone already: its shell takes the terminal back itself
    finally:
        signal.signal(signal.SIGTTOU, old)
        os.close(fd)


def site_url(env: dict, web_port: int) -> str:
    """Where links in e-mails point: ``SITE_URL`` when set, else this run's web port."""
    return env.get("SITE_URL") or f"http://127.0.0.1:{web_port}"


def second_factor_skipped(env: dict) -> bool:
    """As the settings decide it: ``STAFF_MFA_REQUIRED``, by default off in debug mode."""
    debug = env.get("DJANGO_DEBUG", "").strip().lower() in TRUE_WORDS
    value = env.get("STAFF_MFA_REQUIRED", "")
    required = value.strip().lower() in TRUE_WORDS if value else not debug
    return not required


TRUE_WORDS = {"1", "true", "yes", "on"}


def sign_in_lines(env: dict, web_port: int) -> list[str]:
    """What to do first: where to sign in, as whom, and whether a second factor is asked."""
    login = f"http://127.0.0.1:{web_port}/accounts/login/"
    lines = [
        f"sign in at {login} as `staff` (finance staff: queues and cases);",
        "    `supervisor` approves overrides and runs the drill, `auditor` reads the audit",
        "    trail, `admin` is a supervisor who also opens /admin/ (passwords above, or",
        '    set one: make manage ARGS="add_staff staff --role finance_staff --password P")',
    ]
    if second_factor_skipped(env):
        lines.append(
            "demo mode (DJANGO_DEBUG=1): sign-in asks for no second factor (no authenticator app)"
        )
    else:
        lines.append("STAFF_MFA_REQUIRED=1: supervisors and auditors enrol an authenticator")
    return lines


def _interrupted(_signum, _frame) -> None:
    raise KeyboardInterrupt


def main() -> int:
    taken = terminal_take()
    try:
        return _main()
    finally:
        terminal_give_back(taken)


def _main() -> int:
    # SIGTERM while starting up stops what was started, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupted)
    env, web_port = run_env()
    started = Started()
    try:
        return start_and_serve(env, web_port, started)
    except KeyboardInterrupt:
        # Ctrl-C while starting up: what was started is stopped below; asked for, not a fault.
        return 0
    except local.LocalEngineError as exc:
        fail(f"no DynamoDB engine could start: {exc}")
        return 1
    finally:
        started.stop()
        say("stopped")


def run_env() -> tuple[dict, int]:
    """The environment of everything this run starts, and the web port (free, or the run
    stops here)."""
    env = dict(os.environ)
    env.setdefault("DJANGO_DEBUG", "1")
    env.setdefault("DEMO_MODE", "1")
    env.setdefault("DEFAULT_FUNDS", DEMO_FUNDS)
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    # The supervisors' daily e-mail is printed by the worker, never sent, on this machine.
    env.setdefault("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
    web_port = int(env.setdefault("WEB_PORT", "8000"))
    env["SITE_URL"] = site_url(env, web_port)
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):
        # Two gunicorn workers and the Celery worker: /metrics sums every process's
        # counters from this folder, emptied at each start (prometheus_client's rule).
        metrics_dir = Path(env.get("VAR_DIR") or ROOT / "var") / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    if port_answers("127.0.0.1", web_port):
        fail(f"port {web_port} is in use: stop what runs there or set WEB_PORT")
    return env, web_port


class Started:
    """The processes and engines this run started: stopped, newest process first, when
    it ends."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.engines: list[local.LocalEngine] = []

    def engine(
        self, env: dict, port_var: str, default: str, log: Path, data: Path
    ) -> local.LocalEngine:
        port = int(env.get(port_var, default))
        if port_answers("127.0.0.1", port):
            fail(f"port {port} is in use: stop what runs there or set {port_var}")
        say(f"starting DynamoDB Local, data in {data} (first run downloads it once with npm)")
        engine = local.start_best_engine(port, log_path=log, db_path=data)
        self.engines.append(engine)
        say(f"{engine.kind} answering at {engine.endpoint_url}")
        return engine

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for engine in self.engines:
            engine.stop()


def start_and_serve(env: dict, web_port: int, started: Started) -> int:
    """Start everything, step by step, then serve until stopped; returns the exit status."""
    redis_proc = ensure_redis(env)
    if redis_proc:
        started.procs.append(redis_proc)
    var = Path(env.get("VAR_DIR") or ROOT / "var")
    var.mkdir(exist_ok=True)
    start_clean(env, var)
    owned = not env.get("DYNAMODB_ENDPOINT_URL")
    seeded_mark = first_engine_start(env, var, started)
    lag_ms = second_region_start(env, var, started)
    port = sink_port(env, var, lambda p: port_answers("127.0.0.1", p), local.free_port)
    if port_answers("127.0.0.1", port):
        fail(f"port {port} is in use: stop what runs there or set WEBHOOK_SINK_PORT")
    secret_file = var / SINK_SECRET_FILE
    procfile = str(var / "Procfile.run")
    Path(procfile).write_text(
        procfile_text(
            (ROOT / "Procfile").read_text(),
            sink_port=port,
            secret_file=secret_file,
            lag_ms=lag_ms,
        )
    )
    dynamodb_setup(env, owned=owned)
    manage(env, "migrate", "--noinput", capture=True)
    say("Django database migrated")
    # gunicorn serves static files through whitenoise from STATIC_ROOT, as in
    # production: collected (and pre-compressed) once here, not found per request.
    manage(env, "collectstatic", "--noinput", capture=True)
    say("static files collected")
    create_demo_users(env)
    demo_tenants(env, sink=sink_url(port), secret_file=secret_file)
    if env.get("DEMO_SEED", "1") == "1":
        demo_seed(env, seeded_mark)
    for line in sign_in_lines(env, web_port):
        say(line)
    say(f"web on http://127.0.0.1:{web_port}/  ·  Ctrl-C stops everything")
    return serve(env, procfile, started)


def start_clean(env: dict, var: Path) -> None:
    """``RESET=1``, or a start stopped while it seeded the demo data: delete the data
    ``make run`` keeps, and say what went."""
    if env.get("RESET", "") == "1":
        problem = reset_problem(env, var)
        if problem:
            fail(f"RESET=1: {problem}")
        gone = reset(env, var)
        say("RESET=1: starting clean (deleted " + (", ".join(map(str, gone)) or "nothing") + ")")
    elif not env.get("DYNAMODB_ENDPOINT_URL") and (gone := seed_interrupted_reset(env, var)):
        say(
            "the last start was stopped while it seeded the demo data: starting clean "
            "(deleted " + ", ".join(map(str, gone)) + ")"
        )


def first_engine_start(env: dict, var: Path, started: Started) -> Path | None:
    """DynamoDB Local on its data folder, unless ``DYNAMODB_ENDPOINT_URL`` names an engine
    already. Returns the mark of that folder's demo data: seeded once per DynamoDB Local
    data folder; an engine of our own that keeps no data (moto's) or one we did not
    start has none (``None``), and is seeded each time."""
    if env.get("DYNAMODB_ENDPOINT_URL"):
        return None
    data = dynamodb_data_dir(var, 1)
    engine = started.engine(env, "DDB_LOCAL_PORT", "8001", var / "dynamodb-local.log", data)
    env["DYNAMODB_ENDPOINT_URL"] = engine.endpoint_url
    return data / DEMO_SEEDED_MARK if engine.kind == "dynamodb_local" else None


def second_region_start(env: dict, var: Path, started: Started) -> str | None:
    """With ``RUN_REGIONS=2``, a second engine as ``eu-west-1``; returns the replication
    lag for the Global Tables stand-in (``None``: one region)."""
    if env.get("RUN_REGIONS", "1") != "2":
        return None
    second = started.engine(
        env,
        "DDB_LOCAL_PORT2",
        "8002",
        var / "dynamodb-local-2.log",
        dynamodb_data_dir(var, 2),
    )
    env["DDB_REGIONS"] = f"us-east-1={env['DYNAMODB_ENDPOINT_URL']},eu-west-1={second.endpoint_url}"
    env.setdefault("AWS_REGION", "us-east-1")
    # The untagged region is named, never "the first listed" (docs/regions.md).
    env.setdefault("DDB_PRIMARY_REGION", "us-east-1")
    lag_ms = env.get("REPLICATION_LAG_MS", "1000")
    say(f"two regions: {env['DDB_REGIONS']} (replication lag {lag_ms} ms)")
    return lag_ms


def demo_seed(env: dict, seeded_mark: Path | None) -> None:
    """Seed the demo data, unless this data folder holds it already (``seeded_mark``)."""
    if seeded_mark is not None and seeded_mark.exists():
        say("demo data kept from the last run (not seeded again; `make run RESET=1` starts clean)")
        return
    say("seeding demo data: a simulate run with faults, a drill (takes ~30 s)")
    if seeded_mark is not None:
        (seeded_mark.parent / DEMO_SEEDING_MARK).write_text("seed_demo started\n")
    manage(env, "seed_demo")
    if seeded_mark is not None:
        seeded_mark.write_text("seed_demo ran against this folder's data\n")


def serve(env: dict, procfile: str, started: Started) -> int:
    """Web, worker, beat, the dispatcher and the receiver under honcho, until Ctrl-C or
    SIGTERM; returns the exit status (0 when stopped on request)."""
    honcho = subprocess.Popen(
        [PYTHON, "-m", "honcho", "start", "-f", procfile, "-d", str(ROOT)], cwd=ROOT, env=env
    )
    started.procs.append(honcho)
    stopping: list[int] = []

    def on_sigterm(signum, _frame) -> None:
        stopping.append(signum)
        honcho.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = honcho.wait()
        # Stopped on request, everything stopped: a clean end, whatever honcho says.
        # A Ctrl-C reaches honcho and this process at once; on a loaded machine honcho
        # may end (130: stopped by SIGINT) before this process runs its handler.
        return 0 if stopping or code in (130, -signal.SIGINT) else code
    except KeyboardInterrupt:
        # A terminal's Ctrl-C reaches honcho too; a signal sent to this process alone
        # does not, so pass it on if honcho is still running a moment later.
        try:
            honcho.wait(timeout=1)
            return 0
        except subprocess.TimeoutExpired:
            honcho.send_signal(signal.SIGINT)
        try:
            honcho.wait(timeout=20)
            return 0
        except subprocess.TimeoutExpired:
            honcho.kill()
            return 1


if __name__ == "__main__":
    sys.exit(main())
