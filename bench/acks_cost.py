"""What one delivery costs during a one-dispatcher backlog drain: CPU seconds of the
dispatcher, the DynamoDB Local JVM and the receiver (``/proc/<pid>/stat`` utime + stime
before and after the drain), the dispatcher's DynamoDB calls by operation and table, and
with ``--profile`` where the dispatcher's own CPU goes (cProfile in CPU time, every
thread; bench/_acks_dispatcher.py).

    python bench/acks_cost.py [--backlog 1000] [--profile] [--seed 26]

Set up as bench/acks.py sets up a drain (an own DynamoDB Local, ``simulate`` first with
no dispatcher running, the shards held until the dispatcher has read the roster); the
figures are per event the receiver got. CPU per delivery moves far less with other load
on the machine than a rate does: it is what each process spent, not how long it waited.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

from _common import start_engine
from acks import environment_set

from tests.processes import Process, wait_for
from tests.reliability.procs import manage, sink_registered

HOLD_S = 10
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (its threads included), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main() -> None:  # noqa: C901, PLR0915  (set up, drain, measure, report, in order)
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-acks-cost-"))
    port = environment_set(tmp)
    engine = start_engine(port)
    sink = None
    running: Process | None = None
    try:
        env = dict(os.environ)
        sink = sink_registered(env, tmp, tenant="sim").start()
        out = manage(
            env,
            "simulate",
            "--pledges",
            str(args.backlog),
            "--seed",
            str(args.seed),
            "--faults",
            "",
            "--threads",
            "16",
            timeout=1800,
        )
        run_id = out.splitlines()[0].split()[1].rstrip(":")

        from reconciliation.acks.repository import AckRepository
        from reconciliation.acks.roster import READ_EVERY_S
        from reconciliation.acks.shard_lease import ShardLeases
        from reconciliation.claims.ack_wakeup import ack_wake
        from reconciliation.stores import first_store

        shards = AckRepository.shards()
        hold = ShardLeases(first_store(), owner="bench-hold", lease_s=HOLD_S, attempt_s=0)
        for shard in shards:
            hold.hold(shard)
        result = tmp / "dispatcher"
        running = Process(
            [sys.executable, "bench/_acks_dispatcher.py"],
            env={
                **env,
                "ACKS_COST_OUT": str(result),
                "ACKS_COST_PROFILE": "1" if args.profile else "0",
            },
            log_path=tmp / "dispatch-acks.log",
        ).start()
        ready = time.monotonic() + READ_EVERY_S + 3  # up, and has read the roster
        while time.monotonic() < ready:
            time.sleep(0.5)
            for shard in shards:
                hold.hold(shard)
        until = max(lease.until for lease in hold.held.values())
        time.sleep(max(0.0, until + 0.2 - time.time()))
        pids = {"dispatcher": running.pid, "dynamodb_local": engine.process.pid}
        pids["webhook_sink"] = sink.process.pid
        before = {name: cpu_s(pid) for name, pid in pids.items()}
        started = time.monotonic()
        for shard in shards:
            ack_wake(shard)
        timeline: list[tuple[float, float, float, int]] = []

        def received() -> bool:
            count = sink.stats(brief=True)["processed_count"]
            timeline.append(
                (
                    time.monotonic() - started,
                    cpu_s(pids["dispatcher"]),
                    cpu_s(pids["dynamodb_local"]),
                    count,
                )
            )
            return count >= args.backlog

        wait_for(received, timeout=900, interval=0.5, what="every event at the sink")
        # Its last records written (nothing of the run due any more).
        repository = AckRepository(first_store())
        prefix = f"sim#sim-{run_id}-"

        def settled() -> bool:
            never = int(time.time()) + 10**7
            return not any(
                i.startswith(prefix)
                for s in shards
                for i in repository.due(s, now=never, limit=1000)
            )

        wait_for(settled, timeout=120, interval=0.5, what="the run's records")
        after = {name: cpu_s(pid) for name, pid in pids.items()}
        wall = time.monotonic() - started
        running.stop()
        stats = sink.stats()
        receipts = [
            stats["received_at"][m]
            for m, e in stats["events"].items()
            if e["data"]["intent_id"].startswith(f"sim-{run_id}-")
        ]
        events = len(receipts)
        span = max(receipts) - min(receipts)
        calls = json.loads((tmp / "dispatcher.calls.json").read_text())
        print(f"events {events}, first to last receipt {span:.2f} s: {events / span:.0f}/s")
        print(f"wake to settled {wall:.2f} s; load {os.getloadavg()[0]:.1f}")
        for name in pids:
            spent = after[name] - before[name]
            print(
                f"{name:15} {spent:7.2f} CPU s  {spent / events * 1000:6.2f} CPU ms/delivery"
                f"  {spent / span:5.2f} cores over the span"
            )
        print("DynamoDB calls (the dispatcher's, from its start):")
        for op, n in sorted(calls.items()):
            print(f"  {op:28} {n:6}  {n / events:.3f}/delivery")
        print("timeline (s, dispatcher CPU s, JVM CPU s, received):")
        for t, d, j, c in timeline[:: max(1, len(timeline) // 25)]:
            spent, jvm = d - before["dispatcher"], j - before["dynamodb_local"]
            print(f"  {t:6.1f} {spent:6.2f} {jvm:6.2f} {c}")
        if args.profile:
            profile = pstats.Stats(str(tmp / "dispatcher.prof"))
            profile.sort_stats("cumulative").print_stats(60)
            profile.sort_stats("tottime").print_stats(40)
        print(f"(logs and profile in {tmp})")
    finally:
        if running is not None:
            running.stop()
        if sink is not None:
            sink.stop()
        engine.stop()


if __name__ == "__main__":
    main()
