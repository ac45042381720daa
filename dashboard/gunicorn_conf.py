"""gunicorn settings for ``make run`` (Procfile ``web``), production-shaped and small.

``gunicorn --config python:dashboard.gunicorn_conf dashboard.wsgi``. Sized for a 2-core
machine: 2 worker processes of 8 threads each (``WEB_CONCURRENCY``, ``WEB_THREADS``).
A request waits on DynamoDB and Redis far more than it computes, so threads carry the
concurrency; connections beyond the 16 in service wait in the listen backlog instead of
being reset, which is what ``runserver`` did under 32 concurrent clients. Static files are
served by whitenoise from ``STATIC_ROOT`` (``bin/run.py`` runs ``collectstatic`` first).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gunicorn.arbiter import Arbiter
    from gunicorn.workers.base import Worker

bind = f"127.0.0.1:{os.environ.get('WEB_PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "8"))
# Queued connections, not refused ones: far above any burst a staff team makes.
backlog = 2048
# Above the request path's DynamoDB budget (a few seconds) and the slowest export page.
timeout = 60
# SIGTERM (Ctrl-C under honcho): in-flight requests get this long, then the workers go.
graceful_timeout = 10
keepalive = 5
# gunicorn's control socket defaults to one path per user ($HOME/.gunicorn/gunicorn.ctl):
# every server on the machine would bind it in turn, and `gunicornc` speak to the last.
# Off, unless a deployment names a path of its own.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
errorlog = "-"


def worker_exit(server: Arbiter, worker: Worker) -> None:
    """In the worker, as it exits (a restart, a stop): the intake request log's entries
    it still buffers are written before it goes (atexit would too; this runs first, while
    the worker's clients are certainly alive). A worker killed outright loses them."""
    # The arbiter reads this file before any worker loads Django; the hook runs in a worker.
    from reconciliation.claims.request_log_buffer import (  # noqa: PLC0415 - in the worker
        request_log_close,
    )

    request_log_close()


def child_exit(server: Arbiter, worker: Worker) -> None:
    """With several workers /metrics sums every process's counters
    (``PROMETHEUS_MULTIPROC_DIR``); a worker that exits leaves its files for the sum
    but must be marked dead for live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess  # noqa: PLC0415 - multiprocess metrics only

        multiprocess.mark_process_dead(worker.pid)
