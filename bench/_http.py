"""The HTTP bench's processes and clients: gunicorn started as the Procfile starts it, the
Django set-up it needs (database, API token, staff users), keep-alive HTTP connections,
and staff sign-in through the real form."""

from __future__ import annotations

import http.client
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT

from tests.staff_http import Conn
from tests.staff_http import sign_in as staff_sign_in

TIMING_RE = re.compile(r'ddb;desc="(\d+) calls";dur=([\d.]+), app;dur=([\d.]+)')
# Production terminates TLS at a proxy (DJANGO_BEHIND_PROXY=1): every request arrives
# over plain http with these headers, so HTTPS redirects, HSTS and secure cookies apply.
PROXY_HEADERS = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}


def server_env(tmp: Path, *, endpoint_url: str, prefix: str, port: int, funds: str) -> dict:
    """The environment of a production web process: debug off (the default), behind a
    TLS-terminating proxy, its own SQLite database and var/ folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDB_", "DJANGO_"))}
    env.pop("FAULT_INJECTION", None)
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_BEHIND_PROXY="1",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(40),
        AUDIT_SIGNING_KEY=secrets.token_urlsafe(40),
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        VAR_DIR=str(tmp / "var"),
        DYNAMODB_ENDPOINT_URL=endpoint_url,
        DDB_TABLE_PREFIX=prefix,
        REDIS_URL="redis://127.0.0.1:6379/11",
        REDBEAT_KEY_PREFIX=f"redbeat:bench-http-{os.getpid()}:",
        # As bin/run.py: two workers sum their /metrics from this folder.
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "prometheus"),
        WEB_PORT=str(port),
        DEFAULT_FUNDS=funds,
        PYTHONUNBUFFERED="1",
        # The benchmarks measure the write path, not the intake rate limit.
        INTAKE_RATE_PER_S="1000000",
        INTAKE_BURST="1000000",
    )
    (tmp / "prometheus").mkdir(parents=True, exist_ok=True)
    return env


def manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)}: {result.stderr[-2000:]}")
    return result.stdout


class ProxyProcess:
    """``_common.LatencyProxy`` in a process of its own: a modelled network hop to
    DynamoDB that takes no CPU or GIL from the process measuring through it."""

    def __init__(self, target_port: int, one_way_ms: float):
        code = (
            "import sys, time; sys.path.insert(0, 'bench'); from _common import LatencyProxy; "
            f"p = LatencyProxy({target_port}, {one_way_ms}); print(p.port, flush=True); "
            "time.sleep(10**6)"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        self.endpoint_url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Gunicorn:
    """``gunicorn --config python:<config> dashboard.wsgi``, the Procfile's ``web``."""

    def __init__(self, env: dict, log: Path, config: str = "dashboard.gunicorn_conf"):
        self.env = env
        self.port = int(env["WEB_PORT"])
        self.log = log
        args = [sys.executable, "-m", "gunicorn", "--config", f"python:{config}", "dashboard.wsgi"]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                args,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz", headers=PROXY_HEADERS)
                if conn.getresponse().status in (200, 503):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gunicorn did not start: {log.read_text()[-3000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def proxied(port: int) -> Conn:
    """A keep-alive connection as the proxy forwards it."""
    return Conn(port, headers=dict(PROXY_HEADERS))


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by every live process of group ``pgid``
    (gunicorn's master and workers, DynamoDB Local's JVM): each is started in a session
    of its own."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def timing(headers) -> tuple[int, float, float] | None:
    """(DynamoDB calls, their ms, the server's ms) from ``Server-Timing``."""
    match = TIMING_RE.search(headers.get("Server-Timing") or "")
    return (int(match[1]), float(match[2]), float(match[3])) if match else None


def sign_in(conn: Conn, username: str, password: str) -> None:
    reply = staff_sign_in(conn, username, password)
    assert reply.status == 302 and "sessionid" in conn.cookies, (reply.status, reply.body[:500])
