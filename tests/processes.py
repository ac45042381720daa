"""Real child processes for tests: each in its own session, so it can be stopped with
everything it started, logging to a file a failure message can quote; and the Celery
worker and beat of this project."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from reconciliation.dynamo.local import free_port

ROOT = Path(__file__).resolve().parents[1]
CELERY = (sys.executable, "-m", "celery", "-A", "dashboard")


def wait_for(predicate, *, timeout: float, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Process:
    """A child process in its own session, logging to ``log_path``."""

    def __init__(self, args: list[str], *, env: dict, log_path: Path, cwd: Path = ROOT):
        self.args = args
        self.env = env
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def start(self) -> Process:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, chars: int = 4000) -> str:
        return self.log()[-chars:]


def celery_worker(
    env: dict,
    log_dir: Path,
    *,
    pool: str = "solo",
    concurrency: int = 1,
    queue: str | None = None,
) -> Process:
    """A worker of this project (not yet started), alone on the broker: no mingle or
    gossip, a unique hostname, and only ``queue`` when given."""
    name = f"test{os.getpid()}-{free_port()}@%h"
    return Process(
        [
            *CELERY,
            "worker",
            *(["-Q", queue] if queue else []),
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            "--hostname",
            name,
        ],
        env=env,
        log_path=log_dir / f"worker-{pool}-{free_port()}.log",
    )


def celery_beat(env: dict, log_dir: Path) -> Process:
    """Beat of this project on RedBeat (not yet started)."""
    return Process(
        [*CELERY, "beat", "--loglevel", "INFO", "--scheduler", "redbeat.RedBeatScheduler"],
        env=env,
        log_path=log_dir / f"beat-{free_port()}.log",
    )
