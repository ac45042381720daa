"""Commit to the receiver's receipt: how long an acknowledgement takes under the simulate
load, for a few dispatcher settings, and how fast one dispatcher drains a backlog.

    python bench/acks.py [--pledges 300] [--seed 26] [--write]

An own DynamoDB Local, a throwaway SQLite database with one endpoint registered for the
simulator's tenant (``add_webhook --tenant sim``), a real ``webhook_sink`` process (no
faults of its own) and real ``dispatch_acks`` processes. Per setting, ``manage.py
simulate`` (its default faults) runs while the dispatchers deliver; once nothing is due
the latency of each of the run's pledges is the sink's first receipt
(``received_at``) minus the event's ``recorded_at`` (the pledge's ``created_at``: its
claim's time, which the commit follows within milliseconds, or after the throttling
back-off). The drain: simulate runs with no dispatcher, then one (then two) start, and
the rate is the run's events over the time from their first receipt to their last.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from _common import ROOT, machine_line, start_engine, write_section


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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def epoch_of(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Bench:
    def __init__(self, env: dict[str, str], tmp: Path, pledges: int, seed: int):
        self.env, self.tmp, self.pledges, self.seed = env, tmp, pledges, seed
        self.runs = 0

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def spawn(self, name: str, *args: str, **extra: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, **extra},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def sink_stats(self) -> dict:
        url = f"http://127.0.0.1:{self.sink_port}/stats"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())

    def start_sink(self) -> subprocess.Popen:
        from reconciliation.dynamo.local import free_port

        self.manage("migrate", "--noinput")
        self.sink_port = free_port()
        out = self.manage(
            "add_webhook", "--tenant", "sim", f"http://127.0.0.1:{self.sink_port}/hooks"
        )
        secret = out.strip().splitlines()[-1]
        sink = self.spawn("sink", "webhook_sink", "--port", str(self.sink_port), "--secret", secret)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.sink_stats()
                return sink
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def dispatchers(self, setting: Setting) -> list[subprocess.Popen]:
        return [
            self.spawn(f"dispatch-{self.runs}-{n}", "dispatch_acks", ACK_POLL_S=str(setting.poll_s))
            for n in range(setting.dispatchers)
        ]

    def simulate(self, threads: int) -> tuple[str, float]:
        """One simulate run: its run id (the intents' key prefix) and its duration."""
        self.runs += 1
        started = time.monotonic()
        seed = str(self.seed + self.runs)
        out = self.manage(
            "simulate", "--pledges", str(self.pledges), "--seed", seed, "--threads", str(threads)
        )
        first = out.splitlines()[0]  # "run <id>: N intents, …"
        return first.split()[1].rstrip(":"), time.monotonic() - started

    def settled(self, timeout: float = 600) -> None:
        from reconciliation import clock
        from reconciliation.acks.repository import AckRepository
        from reconciliation.stores import first_store

        repository = AckRepository(first_store())
        deadline = time.monotonic() + timeout
        while any(
            repository.due(s, now=clock.epoch() + 10**7, limit=1) for s in repository.shards()
        ):
            if time.monotonic() > deadline:
                raise SystemExit("acknowledgements still due after the timeout")
            time.sleep(0.5)

    def measure(self, setting: Setting, *, backlog: bool) -> Result:
        started = None if backlog else self.dispatchers(setting)
        run_id, simulate_s = self.simulate(setting.threads)
        running = started if started is not None else self.dispatchers(setting)
        try:
            self.settled()
        finally:
            for process in running:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(30)
        stats = self.sink_stats()
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
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-acks-"))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_DEBUG="0",
        DJANGO_HTTPS="0",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(40),
        AUDIT_SIGNING_KEY="bench-acks-signing-key",
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        VAR_DIR=str(tmp / "var"),
        WEBHOOK_ALLOW_LOOPBACK="1",
        PYTHONUNBUFFERED="1",
        DDB_REGIONS="",
        DDB_PRIMARY_REGION="",
    )
    os.environ.pop("FAULT_INJECTION", None)
    engine = start_engine()
    bench = Bench(dict(os.environ), tmp, args.pledges, args.seed)
    sink = bench.start_sink()
    try:
        load = [bench.measure(s, backlog=False) for s in SETTINGS]
        drains = [bench.measure(s, backlog=True) for s in DRAINS]
    finally:
        os.killpg(sink.pid, signal.SIGTERM)
        sink.wait(30)
        engine.stop()
    report = render(load, drains, args.pledges)
    print(report)
    print(f"(process logs in {tmp})")
    if args.write:
        write_section("acks", report)


if __name__ == "__main__":
    main()
