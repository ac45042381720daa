"""``make run``'s process set: it serves the login page and a healthy ``/healthz``, and
Ctrl-C leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from reconciliation.dynamo.local import free_port

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


@pytest.mark.dynamodb_local_only
def test_make_run_serves_and_ctrl_c_stops_everything(tmp_path, dynamodb_local):
    """bin/run.py (what `make run` calls) comes up, answers, and stops cleanly on SIGINT."""
    web_port, ddb_port = free_port(), free_port()
    env = dict(
        os.environ,
        WEB_PORT=str(web_port),
        DDB_LOCAL_PORT=str(ddb_port),
        VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        REDBEAT_KEY_PREFIX=f"redbeat:test-{web_port}:",
        DEMO_SEED="0",
    )
    env.pop("DYNAMODB_ENDPOINT_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "bin/run.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + 120
        health = None
        while time.monotonic() < deadline:
            try:
                status, body = _get(base + "/healthz")
                health = (status, json.loads(body))
                if status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.5)
        assert health == (200, {"dynamodb": "ok", "redis": "ok"})
        status, body = _get(base + "/accounts/login/")
        assert status == 200 and b"Sign in" in body
        assert len(_session_processes(proc.pid)) >= 4  # run.py, honcho, web, worker, beat
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert "demo users (passwords are shown this once" in output
    assert _session_processes(proc.pid) == []
    with pytest.raises(OSError):
        _get(f"http://127.0.0.1:{ddb_port}/")
