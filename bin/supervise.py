#!/usr/bin/env python
"""Run a command and start it again whenever it exits on its own (with backoff).

``make run`` wraps Celery beat and the worker in this: redbeat lets a Redis outage end the
beat process, any unrecoverable error ends a worker, and honcho would then stop the whole
stack. In production use your process manager's restart policy instead (systemd
``Restart=always``, Kubernetes, supervisord).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: supervise.py COMMAND [ARGS…]", file=sys.stderr)
        return 2
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum, _frame):
        nonlocal stopping
        stopping = True
        if child and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    delay = 1.0
    while True:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        code = child.wait()
        if stopping:
            return code
        if time.monotonic() - started > 60:
            delay = 1.0  # it ran a good while: this is a fresh failure
        print(
            f"[supervise] {argv[0]} exited with {code}; restarting in {delay:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.2)
        if stopping:
            return code
        delay = min(delay * 2, 30.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
