"""gunicorn settings for the HTTP bench's profiling run: ``dashboard/gunicorn_conf.py`` as
it is, plus cProfile (CPU time) around every request in each worker thread (cProfile sees one
thread; each thread keeps its own profile per kind, API or pages), merged and written
per worker to ``BENCH_PROFILE_DIR`` when the worker exits."""

from __future__ import annotations

import cProfile
import os
import pstats
import threading
import time
from pathlib import Path

from dashboard.gunicorn_conf import *  # noqa: F403 (the production settings, unchanged)

_local = threading.local()
_profiles: list[tuple[str, cProfile.Profile]] = []
_lock = threading.Lock()


def _profile(kind: str) -> cProfile.Profile:
    mine = getattr(_local, "profiles", None)
    if mine is None:
        mine = _local.profiles = {}
    profile = mine.get(kind)
    if profile is None:
        # CPU time of this thread: a wait for DynamoDB, a client or the GIL (16 threads
        # on 2 cores) costs nothing here, so the figures are what each request computes.
        profile = mine[kind] = cProfile.Profile(time.thread_time)
        with _lock:
            _profiles.append((kind, profile))
    return profile


def post_worker_init(worker) -> None:
    app = worker.wsgi

    def profiled(environ, start_response):
        path = environ.get("PATH_INFO", "")
        # Sign-in (a deliberately slow password hash) is not a page render.
        kind = "api" if path.startswith("/api/") else "signin" if "login" in path else "pages"
        profile = _profile(kind)
        profile.enable()
        try:
            return app(environ, start_response)
        finally:
            profile.disable()

    worker.wsgi = profiled


def worker_exit(server, worker) -> None:
    folder = Path(os.environ["BENCH_PROFILE_DIR"])
    for kind in ("api", "pages", "signin"):
        mine = [profile for k, profile in _profiles if k == kind]
        if mine:
            stats = pstats.Stats(mine[0])
            for profile in mine[1:]:
                stats.add(profile)
            stats.dump_stats(folder / f"{kind}-{os.getpid()}.pstats")
