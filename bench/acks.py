"""Acknowledgements: how fast dispatchers drain a backlog, how long a pledge waits from
commit to receipt under a steady load, and whether a tenant whose endpoint hangs slows
another tenant down.

    python bench/acks.py [--pledges 600] [--backlog 3000] [--seed 26]
        [--only drain|latency|isolation] [--write]

An own DynamoDB Local, a throwaway SQLite database, real ``webhook_sink`` processes and
real ``dispatch_acks`` processes at their default settings (``ACK_POLL_S`` 2 s, the
wake-up on the Redis at ``REDIS_URL``: give it one, or the dispatchers only poll).

- **Drain**: ``manage.py simulate --pledges BACKLOG`` (no faults) with no dispatcher
  running, then 1, 2 and 4 dispatchers start (held back until each knows its share),
  after one untimed drain that warms DynamoDB Local's JIT; the rate is the run's events
  over the time from their first receipt to their last, at the loopback sink.
- **Latency**: ``simulate --rate R`` (no faults: the load, not the throttling back-off)
  at 10 and 50 pledges/s while one dispatcher delivers; per event the sink's first
  receipt (``received_at``) minus its ``recorded_at`` (the pledge's claim time, which
  the commit follows within milliseconds).
- **Isolation**: the latency at 10 pledges/s of tenant ``sim`` (healthy sink) alone;
  again while tenant ``busy`` gets 10 pledges/s too, its endpoint answering (the
  neighbour's load alone); and while tenant ``hang`` gets 10 pledges/s and its endpoint
  holds every answer past the read timeout.

``--pledges 20 --backlog 40`` runs every part at a tiny size (a check that the bench works). The
processes are started by the reliability run's helpers (tests/reliability/procs.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from _common import machine_line, start_engine, write_section

from reconciliation.claims.models import pledge_home
from reconciliation.dynamo.local import free_port
from tests.processes import Process, wait_for
from tests.reliability.procs import SinkProcess, dispatcher, django_env, manage, sink_registered

DRAIN_DISPATCHERS = (1, 2, 4)
LATENCY_RATES = (10.0, 50.0)
ISOLATION_RATE = 10.0
SIMULATE_THREADS = 16  # enough that a paced run keeps its pace
SIMULATE_TIMEOUT_S = 1800
HANG_TENANT = "hang"
HANG_FUND = "HANGING"
# A neighbour as busy as ``hang`` whose endpoint answers: what the neighbour's load
# alone costs ``sim``, apart from what its hanging costs.
BUSY_TENANT = "busy"
# The bench holds the shards this long at a time while the dispatchers start.
HOLD_S = 10


@dataclass(frozen=True)
class Latency:
    label: str
    events: int
    median_s: float
    p99_s: float
    max_s: float
    offered_per_s: float  # the run's events over its first to last commit
    load: float  # the machine's 1-minute load average at the end


@dataclass(frozen=True)
class Drain:
    dispatchers: int
    events: int
    rate_per_s: float
    load: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def epoch_of(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class NeighbourLoad:
    """Pledges of ``tenant`` (``hang`` by default) at ``rate`` a second, from this
    process (the service layer, as simulate submits), until stopped."""

    def __init__(self, rate: float, tenant: str = HANG_TENANT):
        self.rate = rate
        self.tenant = tenant
        self.stopped = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from reconciliation.actors import Actor, Role
        from reconciliation.claims import intake
        from reconciliation.claims.request import parse_fields

        tenant = self.tenant
        actor = Actor(username=f"api:{tenant}", role=Role.API, address="bench")
        # A fund of its own: simulate checks its funds' ledger against its own pledges.
        body = {"donor_ref": "B-1", "fund": HANG_FUND, "amount": "5.00", "currency": "USD"}
        started = time.monotonic()
        while not self.stopped.is_set():
            key = f"{tenant}-{started:.0f}-{self.sent}"
            intake.pledge_submit(
                pledge_home(tenant, key),
                tenant=tenant,
                idempotency_key=key,
                request=parse_fields(body),
                actor=actor,
            )
            self.sent += 1
            self.stopped.wait(max(0.0, started + self.sent / self.rate - time.monotonic()))

    def __enter__(self) -> NeighbourLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


class Bench:
    """The sinks, the dispatchers and ``manage.py`` as the reliability run starts them
    (tests/reliability/procs.py), in ``env``; their logs in ``tmp``."""

    def __init__(
        self,
        env: dict[str, str],
        tmp: Path,
        sink: SinkProcess,
        pledges: int,
        backlog: int,
        seed: int,
    ):
        self.env, self.tmp, self.sink, self.seed = env, tmp, sink, seed
        self.pledges, self.backlog = pledges, backlog
        self.runs = 0
        self.started = 0  # dispatchers started: each logs to a file of its own

    def dispatchers(self, count: int) -> list[Process]:
        self.started += count
        running = [
            dispatcher(self.env, self.tmp, n) for n in range(self.started - count, self.started)
        ]
        return [process.start() for process in running]

    def simulate(self, rate: float | None = None, pledges: int | None = None) -> tuple[str, float]:
        """One simulate run without faults: its run id (the intents' key prefix) and how
        long it took."""
        self.runs += 1
        args = ["--pledges", str(pledges or self.pledges), "--seed", str(self.seed + self.runs)]
        args += ["--faults", "", "--threads", str(SIMULATE_THREADS)]
        if rate:
            args += ["--rate", str(rate)]
        started = time.monotonic()
        out = manage(self.env, "simulate", *args, timeout=SIMULATE_TIMEOUT_S)
        first = out.splitlines()[0]  # "run <id>: N intents, …"
        return first.split()[1].rstrip(":"), time.monotonic() - started

    def settled(self, run_id: str, timeout: float = 600) -> None:
        """Until no pledge of the run is due any more (another tenant's may be)."""
        from reconciliation import clock
        from reconciliation.acks.repository import AckRepository
        from reconciliation.stores import first_store

        repository = AckRepository(first_store())
        prefix = f"sim#sim-{run_id}-"

        def due() -> bool:
            never = clock.epoch() + 10**7  # whenever due
            return any(
                i.startswith(prefix)
                for s in repository.shards()
                for i in repository.due(s, now=never, limit=1000)
            )

        wait_for(lambda: not due(), timeout=timeout, interval=0.5, what="the run's deliveries")

    def receipts(self, run_id: str) -> tuple[list[float], list[float], list[float]]:
        """The run's events at the sink: latencies, receipt times, commit (claim) times."""
        stats = self.sink.stats()
        prefix = f"sim-{run_id}-"
        latencies, received, recorded = [], [], []
        for message, event in stats["events"].items():
            if event["data"]["intent_id"].startswith(prefix):
                received.append(stats["received_at"][message])
                recorded.append(epoch_of(event["data"]["recorded_at"]))
                latencies.append(received[-1] - recorded[-1])
        return latencies, received, recorded

    def drain(self, count: int) -> Drain:
        """The backlog made with no dispatcher running; then ``count`` start. Until all
        are up and have read the roster (each knows its share), the bench holds every
        shard's lease itself; it lets them run out and wakes every shard then, so the
        dispatchers start on the backlog together, not the first up alone."""
        from reconciliation.acks.repository import AckRepository
        from reconciliation.acks.roster import READ_EVERY_S
        from reconciliation.acks.shard_lease import ShardLeases
        from reconciliation.claims.ack_wakeup import ack_wake
        from reconciliation.stores import first_store

        run_id, _ = self.simulate(pledges=self.backlog)
        shards = AckRepository.shards()
        hold = ShardLeases(first_store(), owner="bench-hold", lease_s=HOLD_S, attempt_s=0)
        for shard in shards:
            hold.hold(shard)
        running = self.dispatchers(count)
        try:
            ready = time.monotonic() + READ_EVERY_S + 1  # every dispatcher read the roster
            while time.monotonic() < ready:
                time.sleep(0.5)
                for shard in shards:
                    hold.hold(shard)  # renewed when half of it is gone
            until = max(lease.until for lease in hold.held.values())
            time.sleep(max(0.0, until + 0.2 - time.time()))
            for shard in shards:
                ack_wake(shard)
            self.settled(run_id)
        finally:
            for process in running:
                process.stop()
        _, received, _ = self.receipts(run_id)
        span = max(received) - min(received)
        result = Drain(
            count, len(received), len(received) / span if span else float("nan"), os.getloadavg()[0]
        )
        print(result, flush=True)
        return result

    def latency(self, label: str, rate: float, *, beside: str = "") -> Latency:
        """``simulate --rate rate`` for tenant ``sim``, with ``beside`` (a tenant) posting
        as many pledges a second meanwhile."""
        running = self.dispatchers(1)
        try:
            with NeighbourLoad(rate, beside) if beside else contextlib.nullcontext():
                run_id, _ = self.simulate(rate)
            self.settled(run_id)
        finally:
            for process in running:
                process.stop()
        latencies, _, recorded = self.receipts(run_id)
        span = max(recorded) - min(recorded)
        result = Latency(
            label=label,
            events=len(latencies),
            median_s=statistics.median(latencies),
            p99_s=percentile(latencies, 0.99),
            max_s=max(latencies),
            offered_per_s=len(latencies) / span if span else float("nan"),
            load=os.getloadavg()[0],
        )
        print(result, flush=True)
        return result


def render(
    drains: list[Drain],
    latencies: list[Latency],
    isolation: list[Latency],
    pledges: int,
    backlog: int,
) -> str:
    lines = [
        "## Acknowledgements: drain, commit to receipt, isolation (`bench/acks.py`)",
        "",
        f"DynamoDB Local; `manage.py simulate --pledges {pledges} --faults ''` a latency run; real",
        "`dispatch_acks` processes at their default settings (`ACK_POLL_S` 2 s, the commit's",
        "wake-up on Redis, `ACK_WORKERS` 32, 8 requests at once per endpoint) delivering to",
        f"real `webhook_sink` processes on loopback. {machine_line()}.",
        "",
        f"Draining a backlog of {backlog} pledges (simulate first, no dispatcher running; then",
        "they start, and begin together once each knows its share): the run's events over",
        "the time from their first receipt to their last.",
        "",
        "| dispatchers | events | delivered/s | × one | load |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    one = drains[0].rate_per_s if drains else float("nan")
    for d in drains:
        lines.append(
            f"| {d.dispatchers} | {d.events} | {d.rate_per_s:.0f} | {d.rate_per_s / one:.2f} "
            f"| {d.load:.1f} |"
        )
    lines += [
        "",
        "Commit to receipt under a steady load (`simulate --rate R`), one dispatcher: the",
        "sink's first receipt of each event minus its `recorded_at`.",
        "",
        "| load | events | events/s offered | median | p99 | max | load avg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in latencies + isolation:
        lines.append(
            f"| {r.label} | {r.events} | {r.offered_per_s:.1f} | {r.median_s:.2f} s "
            f"| {r.p99_s:.2f} s | {r.max_s:.2f} s | {r.load:.1f} |"
        )
    if len(isolation) == 3:
        alone, busy, hanging = isolation
        lines += [
            "",
            f"Isolation: tenant `sim`'s median with tenant `{HANG_TENANT}`'s endpoint hanging "
            f"beside it is {hanging.median_s / alone.median_s:.2f} × its median alone, and "
            f"{hanging.median_s / busy.median_s:.2f} × its median beside `{BUSY_TENANT}`, "
            "as busy but answering (the neighbour's load alone: "
            f"{busy.median_s / alone.median_s:.2f} ×).",
        ]
    return "\n".join(lines)


def environment_set(tmp: Path) -> int:
    """This process's environment, which its children get too (it reads ``acks_due``
    as they write it): Django in ``tmp``, an own DynamoDB Local's port (returned, not
    yet started), loopback webhooks, the wake-up on the Redis the system runs."""
    port = free_port()
    os.environ.pop("FAULT_INJECTION", None)
    os.environ.update(
        django_env(
            tmp,
            endpoint_url=f"http://127.0.0.1:{port}",
            table_prefix="bench-",
            redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
            AUDIT_SIGNING_KEY="bench-acks-signing-key",
            WEBHOOK_ALLOW_LOOPBACK="1",
        )
    )
    return port


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pledges", type=int, default=600, help="pledges of a latency run")
    parser.add_argument("--backlog", type=int, default=3000, help="pledges of a drain")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--only", choices=("drain", "latency", "isolation"), default=None)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.write and args.only:
        parser.error("--write replaces the whole section: run every part")
    tmp = Path(tempfile.mkdtemp(prefix="bench-acks-"))
    port = environment_set(tmp)
    drains: list[Drain] = []
    latencies: list[Latency] = []
    isolation: list[Latency] = []
    with contextlib.ExitStack() as running:
        running.callback(start_engine(port).stop)
        env = dict(os.environ)
        sink = sink_registered(env, tmp, tenant="sim")
        running.callback(sink.stop)
        # Holds every answer past the dispatcher's read timeout (10 s): a hanging endpoint.
        hanging = sink_registered(
            env, tmp, tenant=HANG_TENANT, flags=["--misbehave", "timeout", "--delay", "30"]
        )
        manage(env, "add_fund", "--tenant", HANG_TENANT, HANG_FUND, "--currency", "USD")
        running.callback(hanging.stop)
        busy = sink_registered(env, tmp, tenant=BUSY_TENANT)
        manage(env, "add_fund", "--tenant", BUSY_TENANT, HANG_FUND, "--currency", "USD")
        running.callback(busy.stop)
        bench = Bench(env, tmp, sink.start(), args.pledges, args.backlog, args.seed)
        if args.only in (None, "drain"):
            # One drain untimed first: DynamoDB Local's JIT warms on the first one, which
            # ran 0.7x the speed of the same drain repeated, and flattered every ratio
            # against it.
            bench.drain(1)
            drains = [bench.drain(n) for n in DRAIN_DISPATCHERS]
        if args.only in (None, "latency"):
            latencies = [bench.latency(f"{r:g} pledges/s", r) for r in LATENCY_RATES]
        if args.only in (None, "isolation"):
            hanging.start()
            busy.start()
            isolation = [
                bench.latency(f"{ISOLATION_RATE:g}/s, `sim` alone", ISOLATION_RATE),
                bench.latency(
                    f"{ISOLATION_RATE:g}/s, `{BUSY_TENANT}` answering beside",
                    ISOLATION_RATE,
                    beside=BUSY_TENANT,
                ),
                bench.latency(
                    f"{ISOLATION_RATE:g}/s, `{HANG_TENANT}` hanging beside",
                    ISOLATION_RATE,
                    beside=HANG_TENANT,
                ),
            ]
    report = render(drains, latencies, isolation, args.pledges, args.backlog)
    print(report)
    print(f"(process logs in {tmp})")
    if args.write:
        write_section("acks", report)


if __name__ == "__main__":
    main()
