"""Real processes for the reliability runs: a Redis of our own (which the tests stop and
start again), the production server (gunicorn), and a plain HTTP client of the intake
API. Every process is a :class:`tests.processes.Process`: its own session, its own log."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from reconciliation.dynamo.local import free_port
from tests.databases import subprocess_database_url
from tests.processes import ROOT, Process, wait_for

# --- Redis --------------------------------------------------------------------------------


class RedisServer:
    """A throwaway ``redis-server`` on a port of its own: stopping it never touches the
    Redis other tests and ``make run`` use. Without ``data_dir`` it keeps nothing across a
    restart; with one it keeps an append-only file there, fsynced on every write, as a
    deployed broker does, so a restart loses no message."""

    def __init__(self, log_dir: Path, data_dir: Path | None = None):
        self.port = free_port()
        self.log_dir = log_dir
        self.data_dir = data_dir
        self.process: Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> None:
        self.starts += 1
        if self.data_dir is None:
            persistence = ["--appendonly", "no"]
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            persistence = ["--appendonly", "yes", "--appendfsync", "always"]
            persistence += ["--dir", str(self.data_dir)]
        self.process = Process(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *persistence,
            ],
            env=dict(os.environ),
            log_path=self.log_dir / f"redis-{self.port}-{self.starts}.log",
        ).start()
        wait_for(self.ping, timeout=15, what=f"redis on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
        wait_for(lambda: not self.ping(), timeout=10, what="redis to stop")


# --- Django / gunicorn / Celery -----------------------------------------------------------


def django_env(
    tmp: Path,
    *,
    endpoint_url: str,
    table_prefix: str,
    redis_url: str,
    database_url: str | None = None,
    **extra: str,
) -> dict:
    """The environment of a production-like process of this project, on plain http, with
    its Django database at ``database_url`` (by default a fresh one:
    tests/databases.py · ``subprocess_database_url``, SQLite under ``tmp`` or PostgreSQL
    under ``make test-postgres``)."""
    env = dict(os.environ)
    env.pop("FAULT_INJECTION", None)
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_DEBUG="0",
        # Plain http on 127.0.0.1: production security settings must not redirect to
        # https or refuse the host (the switch is documented in docs/reliability.md).
        DJANGO_HTTPS="0",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(40),
        AUDIT_SIGNING_KEY="reliability-test-signing-key",
        DATABASE_URL=database_url or subprocess_database_url(tmp),
        VAR_DIR=str(tmp / "var"),
        DYNAMODB_ENDPOINT_URL=endpoint_url,
        DDB_TABLE_PREFIX=table_prefix,
        DDB_REGIONS="",
        DDB_PRIMARY_REGION="",
        REDIS_URL=redis_url,
        REDBEAT_KEY_PREFIX=f"redbeat:reliability-{os.getpid()}-{free_port()}:",
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="INFO",
        # These runs load the write path, not the intake rate limit (its own tests:
        # tests/dashboard/test_intake_rate_limit.py): no tenant is ever refused here.
        INTAKE_RATE_PER_S="1000000",
        INTAKE_BURST="1000000",
    )
    env.update(extra)
    return env


def manage(env: dict, *args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)}: {result.stderr[-2000:]}"
    return result.stdout


class ApiServer:
    """``gunicorn dashboard.wsgi`` (the documented production server) on a free port,
    with its own Django database (``env``'s ``DATABASE_URL``) for users and API tokens."""

    def __init__(self, env: dict, log_dir: Path, *, workers: int = 2, threads: int = 8):
        self.env = env
        self.port = free_port()
        self.workers = workers
        self.threads = threads
        self.process = Process(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "dashboard.wsgi",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--bind",
                f"127.0.0.1:{self.port}",
                "--timeout",
                "60",
                "--graceful-timeout",
                "5",
            ],
            env=env,
            log_path=log_dir / f"gunicorn-{self.port}.log",
        )
        self.token = ""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self, tenant: str) -> str:
        """Create the Django tables and an API token for ``tenant`` (the last line printed
        by ``issue_api_token``, docs/design.md §11). The token creates the tenant, with the
        funds the workload pledges to as its ``DEFAULT_FUNDS``."""
        from tests.reliability.workload import CURRENCIES, FUNDS

        manage(self.env, "migrate", "--noinput")
        funds = ",".join(f"{fund}:{currency}" for fund in FUNDS for currency in CURRENCIES)
        # Preparation is not under test: no injected fault reaches the token's audit event.
        setup = {**self.env, "DEFAULT_FUNDS": funds, "FAULT_INJECTION": ""}
        issued = manage(setup, "issue_api_token", "--tenant", tenant)
        self.token = issued.strip().splitlines()[-1]
        return self.token

    def start(self) -> ApiServer:
        self.process.start()

        def answers() -> bool:
            assert self.process.alive(), self.process.tail()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                conn.close()
                return True
            except OSError:
                return False

        wait_for(answers, timeout=60, what="gunicorn to answer")
        return self

    def stop(self) -> None:
        self.process.stop()

    def client(self) -> ApiClient:
        return ApiClient("127.0.0.1", self.port, self.token)


def child_pids(pid: int) -> list[int]:
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


# --- HTTP client of the intake API --------------------------------------------------------


@dataclass
class Answer:
    status: int  # 0 when no HTTP response arrived (connection refused or cut)
    body: dict
    headers: dict
    started: float
    ended: float
    error: str = ""

    @property
    def retry_after(self) -> float:
        try:
            return float(self.headers.get("retry-after", "1"))
        except ValueError:
            return 1.0


class ApiClient:
    """One request per connection (``Connection: close``), so a status always belongs to
    exactly one request and no keep-alive race is ever retried behind our back."""

    def __init__(self, host: str, port: int, token: str, timeout: float = 30):
        self.host = host
        self.port = port
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: bytes | None, headers: dict) -> Answer:
        started = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(
                method,
                path,
                body=body,
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "Connection": "close",
                    **headers,
                },
            )
            response = conn.getresponse()
            raw = response.read()
            try:
                payload = json.loads(raw) if raw else {}
            except ValueError:
                payload = {"raw": raw[:500].decode(errors="replace")}
            return Answer(
                response.status,
                payload,
                {k.lower(): v for k, v in response.getheaders()},
                started,
                time.monotonic(),
            )
        except (OSError, http.client.HTTPException) as exc:
            return Answer(0, {}, {}, started, time.monotonic(), error=type(exc).__name__)
        finally:
            conn.close()

    def post(self, key: str, body: dict) -> Answer:
        return self._call(
            "POST",
            "/api/v1/pledges",
            json.dumps(body).encode(),
            {"Idempotency-Key": key, "Content-Type": "application/json"},
        )

    def get(self, key: str) -> Answer:
        return self._call("GET", f"/api/v1/pledges/{quote(key, safe='')}", None, {})


@dataclass
class Tally:
    """Thread-safe counts of what the clients saw."""

    statuses: Counter = field(default_factory=Counter)
    answers: list[tuple[str, str, Answer]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, key: str, answer: Answer) -> None:
        with self._lock:
            self.statuses[f"{kind} {answer.status}"] += 1
            self.answers.append((kind, key, answer))

    def of(self, kind: str) -> Counter:
        return Counter(
            {k.split()[1]: v for k, v in self.statuses.items() if k.startswith(kind + " ")}
        )


# --- several regions (docs/regions.md) ----------------------------------------------------


def regional_env(env: dict, region: str, **extra: str) -> dict:
    """``env`` for a process running in ``region`` (``AWS_REGION``, as AWS sets it where
    the compute runs); ``DDB_REGIONS`` in ``env`` names every region's engine."""
    return {**env, "AWS_REGION": region, **extra}


class ReplicatorProcess:
    """``manage.py replicate_regions --lag-ms LAG`` (the Global Tables stand-in) between
    the engines that ``env``'s ``DDB_REGIONS`` names. Its log ends, after a SIGTERM, with
    one ``ReplicationLatency`` line per table and direction (:meth:`latency`)."""

    def __init__(self, env: dict, log_dir: Path, *, lag_ms: str = "200-2000"):
        self.lag_ms = lag_ms
        self.process = Process(
            [sys.executable, "manage.py", "replicate_regions", "--lag-ms", lag_ms],
            env={**env, "FAULT_INJECTION": ""},
            log_path=log_dir / "replicate-regions.log",
        )

    def start(self) -> ReplicatorProcess:
        self.process.start()
        wait_for(
            lambda: "replicate_regions:" in self.process.log() or not self.process.alive(),
            timeout=60,
            what="replicate_regions to start",
        )
        assert self.process.alive(), self.process.tail()
        return self

    def stop(self) -> None:
        self.process.stop()

    def latency(self) -> dict[str, dict[str, str]]:
        """``table src->dst`` → ``{"n", "p50", "p99", "max"}`` from the stop summary."""
        out: dict[str, dict[str, str]] = {}
        for line in self.process.log().splitlines():
            if not line.startswith("ReplicationLatency table=") or "->" not in line:
                continue
            label, _, rest = line.removeprefix("ReplicationLatency table=").partition(" n=")
            fields = dict(part.split("=", 1) for part in f"n={rest}".split())
            out[label] = fields
        return out

    def totals(self) -> dict[str, int]:
        """The stop line's counts: records read, writes, own writes dropped, conflicts
        lost (a conflict is one item written in two regions before either write reached
        the other)."""
        for line in reversed(self.process.log().splitlines()):
            if line.startswith("replicate_regions: stopped;"):
                parts = line.partition(";")[2].split(",")
                return {" ".join(p.split()[1:]).replace(" ", "_"): int(p.split()[0]) for p in parts}
        return {}


# --- acknowledgements (docs/webhooks.md) --------------------------------------------------


class SinkProcess:
    """``manage.py webhook_sink`` on a loopback port, with ``flags`` (its faults); what it
    saw by ``GET /stats``."""

    def __init__(self, env: dict, log_dir: Path, *, port: int, secret: str, flags: list[str]):
        self.port = port
        self.process = Process(
            [sys.executable, "manage.py", "webhook_sink", "--port", str(port)]
            + ["--secret", secret, *flags],
            env=env,
            log_path=log_dir / f"webhook-sink-{port}.log",
        )

    def stats(self, *, brief: bool = False) -> dict:
        """Everything it saw; ``brief``: the counts and open requests alone (to poll)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/stats/brief" if brief else "/stats")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def up(self) -> bool:
        assert self.process.alive(), self.process.tail()
        try:
            self.stats(brief=True)
        except OSError:
            return False
        return True

    def start(self) -> SinkProcess:
        self.process.start()
        wait_for(self.up, timeout=60, what=f"webhook_sink on {self.port}")
        return self

    def stop(self) -> None:
        self.process.stop()


def sink_registered(
    env: dict, log_dir: Path, *, tenant: str, flags: list[str] | None = None
) -> SinkProcess:
    """A sink (not yet started) on a free loopback port, registered as ``tenant``'s
    endpoint: the Django tables made, ``add_webhook`` run, and the secret it prints last
    (docs/webhooks.md) given to the sink to verify signatures with."""
    manage(env, "migrate", "--noinput")
    port = free_port()
    added = manage(env, "add_webhook", "--tenant", tenant, f"http://127.0.0.1:{port}/hooks")
    secret = added.strip().splitlines()[-1]
    return SinkProcess(env, log_dir, port=port, secret=secret, flags=flags or [])


def dispatcher(env: dict, log_dir: Path, n: int) -> Process:
    """``manage.py dispatch_acks`` in the foreground (not yet started), log of its own."""
    return Process(
        [sys.executable, "manage.py", "dispatch_acks"],
        env=env,
        log_path=log_dir / f"dispatch-acks-{n}.log",
    )
