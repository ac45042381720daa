"""Commit to the receiver's receipt: how long an acknowledgement takes under the simulate
load, for a few dispatcher settings, and how fast one dispatcher drains a backlog.

    python bench/acks.py [--pledges 300] [--seed 26] [--settings all|default] [--write]

An own DynamoDB Local, a throwaway SQLite database with one endpoint registered for the
simulator's tenant (``add_webhook --tenant sim``), a real ``webhook_sink`` process (no
faults of its own) and real ``dispatch_acks`` processes. Per setting, ``manage.py
simulate`` (its default faults) runs while the dispatchers deliver; once nothing is due
the latency of each of the run's pledges is the sink's first receipt
(``received_at``) minus the event's ``recorded_at`` (the pledge's ``created_at``: its
claim's time, which the commit follows within milliseconds, or after the throttling
back-off). The drain: simulate runs with no dispatcher, then one (then two) start, and
the rate is the run's events over the time from their first receipt to their last.
``--settings default`` runs the first of each alone (a check that the bench works; it
writes nothing). The processes are started by the reliability run's helpers
(tests/reliability/procs.py), so the bench and ``tests/reliability/test_acks.py`` start
them one way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from _common import machine_line, start_engine, write_section

from reconciliation.dynamo.local import free_port
from tests.processes import Process, wait_for
from tests.reliability.procs import (
    SinkProcess,
    dispatcher,
    django_env,
    manage,
    sink_registered,
)


@dataclass(frozen=True)
class Setting:
    label: str
    poll_s: float
    dispatchers: int
    threads: int = 8  # simulate's threads: how fast pledges come


@dataclass(frozen=True)
class Result:
    label: str
    events: int
    median_s: float
    p99_s: float
    max_s: float
    simulate_s: float
    rate_per_s: float  # the run's events over first-to-last receipt
    load: float  # the machine's 1-minute load average at the end (other work included)


SETTINGS = (
    Setting("poll 2 s (the default), 1 dispatcher", 2.0, 1),
    Setting("poll 0.5 s, 1 dispatcher", 0.5, 1),
    Setting("poll 0.5 s, 2 dispatchers", 0.5, 2),
    Setting("poll 0.5 s, 1 dispatcher, simulate at 2 threads", 0.5, 1, threads=2),
)
DRAINS = (Setting("backlog, 1 dispatcher", 0.5, 1), Setting("backlog, 2 dispatchers", 0.5, 2))
# A run of 300 pledges takes 20-30 s on 2 shared cores: a stuck one, not a slow one.
SIMULATE_TIMEOUT_S = 1800


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def epoch_of(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Bench:
    """The sink, the dispatchers and ``manage.py`` as the reliability run starts them
    (tests/reliability/procs.py), in ``env``; their logs in ``tmp``."""

    def __init__(self, env: dict[str, str], tmp: Path, sink: SinkProcess, pledges: int, seed: int):
        self.env, self.tmp, self.sink, self.pledges, self.seed = env, tmp, sink, pledges, seed
        self.runs = 0
        self.started = 0  # dispatchers started: each logs to a file of its own

    def dispatchers(self, setting: Setting) -> list[Process]:
        env = {**self.env, "ACK_POLL_S": str(setting.poll_s)}
        self.started += setting.dispatchers
        return [
            dispatcher(env, self.tmp, n).start()
            for n in range(self.started - setting.dispatchers, self.started)
        ]

    def simulate(self, threads: int) -> tuple[str, float]:
        """One simulate run: its run id (the intents' key prefix) and its duration."""
        self.runs += 1
        started = time.monotonic()
        args = ["--pledges", str(self.pledges), "--seed", str(self.seed + self.runs)]
        out = manage(
            self.env, "simulate", *args, "--threads", str(threads), timeout=SIMULATE_TIMEOUT_S
        )
        first = out.splitlines()[0]  # "run <id>: N intents, …"
        return first.split()[1].rstrip(":"), time.monotonic() - started

    def settled(self, timeout: float = 600) -> None:
        from reconciliation import clock
        from reconciliation.acks.repository import AckRepository
        from reconciliation.stores import first_store

        repository = AckRepository(first_store())

        def due() -> bool:
            never = clock.epoch() + 10**7  # whenever due
            return any(repository.due(s, now=never, limit=1) for s in repository.shards())

        wait_for(lambda: not due(), timeout=timeout, interval=0.5, what="nothing due in acks_due")

    def measure(self, setting: Setting, *, backlog: bool) -> Result:
        started = None if backlog else self.dispatchers(setting)
        run_id, simulate_s = self.simulate(setting.threads)
        running = started if started is not None else self.dispatchers(setting)
        try:
            self.settled()
        finally:
            for process in running:
                process.stop()
        stats = self.sink.stats()
        prefix = f"sim-{run_id}-"
        latencies, receipts = [], []
        for message, event in stats["events"].items():
            if not event["data"]["intent_id"].startswith(prefix):
                continue
            received = stats["received_at"][message]
            receipts.append(received)
            latencies.append(received - epoch_of(event["data"]["recorded_at"]))
        span = max(receipts) - min(receipts)
        result = Result(
            label=setting.label,
            events=len(latencies),
            median_s=statistics.median(latencies),
            p99_s=percentile(latencies, 0.99),
            max_s=max(latencies),
            simulate_s=simulate_s,
            rate_per_s=len(receipts) / span if span else float("nan"),
            load=os.getloadavg()[0],
        )
        print(result, flush=True)
        return result


def render(load: list[Result], drains: list[Result], pledges: int) -> str:
    lines = [
        "## Acknowledgements: commit to receipt (`bench/acks.py`)",
        "",
        f"DynamoDB Local; `manage.py simulate --pledges {pledges}` (its default faults, 8",
        "threads) while real `dispatch_acks` processes deliver to a real `webhook_sink` (no",
        "faults of its own) on loopback; the retry schedule as in production. Latency: the",
        "sink's first receipt of each of the run's events minus its `recorded_at` (the",
        "pledge's claim time; the commit follows within milliseconds, or after the",
        f"throttling back-off). {machine_line()}.",
        "",
        "| dispatchers | events | median | p99 | max | simulate ran | events/s offered | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in load:
        lines.append(
            f"| {r.label} | {r.events} | {r.median_s:.2f} s | {r.p99_s:.2f} s | {r.max_s:.2f} s "
            f"| {r.simulate_s:.1f} s | {r.events / r.simulate_s:.1f} | {r.load:.1f} |"
        )
    lines += [
        "",
        "Draining a backlog (simulate first, with no dispatcher; then the dispatchers start):",
        "the run's events over the time from their first receipt to their last: what the",
        "dispatchers can do, beside the pace the simulator offers above.",
        "",
        "| dispatchers | events | delivered/s | load |",
        "| --- | ---: | ---: | ---: |",
        *(f"| {r.label} | {r.events} | {r.rate_per_s:.1f} | {r.load:.1f} |" for r in drains),
        "",
        "Load: the machine's 1-minute load average when the setting's run ended (2 cores;",
        "other work shares them). The simulator, the dispatchers, the sink and DynamoDB",
        "Local share those cores. A pass (`reconciliation/acks/dispatch.py` ·",
        "`acks_dispatch_once`) queries the 8 shards of `acks_due` one after the other and",
        "sends one pledge at a time; pledges landing in a shard the pass has already",
        "queried wait for the next pass, which starts only when this one is done (plus the",
        "poll interval). So when one dispatcher barely keeps up, passes grow long and the",
        "latency with them; a second dispatcher shares the work (each skips a pledge the",
        "other holds the lease of).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pledges", type=int, default=300)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument(
        "--settings",
        choices=("all", "default"),
        default="all",
        help="default: only the first setting of each table (poll 2 s, 1 dispatcher; a "
        "backlog, 1 dispatcher), to see the bench work end to end",
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.write and args.settings != "all":
        parser.error("--write replaces the whole section: run --settings all")
    settings, drains = (SETTINGS, DRAINS) if args.settings == "all" else (SETTINGS[:1], DRAINS[:1])
    tmp = Path(tempfile.mkdtemp(prefix="bench-acks-"))
    # This process reads acks_due (Bench.settled) with the environment its children get.
    port = free_port()
    os.environ.pop("FAULT_INJECTION", None)
    os.environ.update(
        django_env(
            tmp,
            endpoint_url=f"http://127.0.0.1:{port}",
            table_prefix="bench-",
            # simulate and the dispatchers need no Redis: a port where nothing listens.
            redis_url=f"redis://127.0.0.1:{free_port()}/0",
            AUDIT_SIGNING_KEY="bench-acks-signing-key",
            WEBHOOK_ALLOW_LOOPBACK="1",
        )
    )
    with contextlib.ExitStack() as running:
        running.callback(start_engine(port).stop)
        env = dict(os.environ)
        sink = sink_registered(env, tmp, tenant="sim")
        running.callback(sink.stop)
        bench = Bench(env, tmp, sink.start(), args.pledges, args.seed)
        load = [bench.measure(s, backlog=False) for s in settings]
        drain = [bench.measure(s, backlog=True) for s in drains]
    report = render(load, drain, args.pledges)
    print(report)
    print(f"(process logs in {tmp})")
    if args.write:
        write_section("acks", report)


if __name__ == "__main__":
    main()
