"""``manage.py dispatch_acks`` with its DynamoDB calls counted by operation (and table),
and with ``ACKS_COST_PROFILE`` set, every thread profiled in CPU time (cProfile with
``time.thread_time``): written when it stops (SIGTERM), for bench/acks_cost.py."""

from __future__ import annotations

import cProfile
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

calls: Counter[str] = Counter()
calls_lock = threading.Lock()
profiles: list[cProfile.Profile] = []
profiles_lock = threading.Lock()


def count_calls() -> None:
    from botocore.client import BaseClient

    make = BaseClient._make_api_call

    def counted(self, operation_name, api_params):  # type: ignore[no-untyped-def]
        tables = api_params.get("RequestItems") or {}
        table = api_params.get("TableName") or ",".join(tables)
        with calls_lock:
            calls[f"{operation_name} {table.rsplit('-', 1)[-1]}"] += 1
        return make(self, operation_name, api_params)

    BaseClient._make_api_call = counted  # type: ignore[method-assign]


def profile_threads() -> cProfile.Profile:
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()
            with profiles_lock:
                profiles.append(profile)

    threading.Thread.run = profiled  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    main.enable()
    return main


def trace_passes() -> None:
    """Each pass on stderr: when, which shards, how many pledges taken, how many in flight."""
    from reconciliation.acks.dispatch import Dispatcher

    run_pass = Dispatcher.run_pass
    started = time.monotonic()

    def traced(self, shards=None):  # type: ignore[no-untyped-def]
        taken = run_pass(self, shards)
        woken = "all" if shards is None else ",".join(sorted(shards))
        print(
            f"pass {time.monotonic() - started:8.2f} s {woken}: took {taken},"
            f" {self.pending()} in flight",
            file=sys.stderr,
            flush=True,
        )
        return taken

    Dispatcher.run_pass = traced  # type: ignore[method-assign]


def main() -> None:
    import django
    from django.core.management import execute_from_command_line

    django.setup()
    count_calls()
    trace_passes()
    out = os.environ.get("ACKS_COST_OUT", "")
    profiling = os.environ.get("ACKS_COST_PROFILE") == "1"
    main_profile = profile_threads() if profiling else None
    try:
        execute_from_command_line(["manage.py", "dispatch_acks"])
    finally:
        if main_profile is not None:
            main_profile.disable()
            import pstats

            with profiles_lock:
                stats = pstats.Stats(main_profile)
                for profile in profiles:
                    stats.add(profile)
            stats.dump_stats(out + ".prof")
        if out:
            Path(out + ".calls.json").write_text(json.dumps(dict(calls)))


if __name__ == "__main__":
    main()
