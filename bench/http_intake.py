"""Intake through the real HTTP stack against raw boto3, and staff pages under load.

    python bench/http_intake.py [--rounds 6] [--per-thread 60] [--load-s 20] [--write]
        [--save FILE.json] [--baseline EARLIER.json] [--smoke]

``--smoke`` runs every part once at a few requests each (``make bench-smoke``): the
assertions hold, the figures mean nothing, and it cannot be written.

gunicorn runs as the Procfile and ``make run`` start it (``dashboard/gunicorn_conf.py``:
2 gthread workers × 8 threads) with production settings: debug off, behind a
TLS-terminating proxy (``DJANGO_BEHIND_PROXY=1``; the clients send its headers).

(a) 8 client threads, each on one keep-alive connection, post pledges: 80 % new keys,
20 % replays of keys already committed. Against them, raw boto3 from 8 threads issues
the same DynamoDB calls (a new pledge: the claim PutItem and the commit
TransactWriteItems, its request log entry included; a replay: the claim PutItem refused
with ALL_OLD; the replay's log entry, batched off the request path, has no raw twin). Rounds are
interleaved; medians. Every HTTP answer's ``Server-Timing`` must say 2 DynamoDB calls
for a new pledge and 1 for a replay; the raw client counts its own.

(b) The same intake load plus 8 signed-in finance staff (the sign-in form, with CSRF)
opening queue, case, worklist and pledge pages in turn, each reading a page for a
second on average before the next (``--think-s``): time per page kind (client wall time
and the server's own from ``Server-Timing``, median and p95 against the targets of
100 and 200 ms) and DynamoDB calls per page.

(c) A second gunicorn, profiled (``bench/_gunicorn_profile.py``: cProfile per worker
thread, per kind), runs (b)'s load; the top entries are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import ROOT, RoundTrips, machine_line, median, start_engine, write_section
from _http import (
    Gunicorn,
    ProxyProcess,
    group_cpu_s,
    manage,
    proxied,
    server_env,
    sign_in,
    timing,
)
from _http_decompose import decompose
from _http_raw import raw_client, raw_write
from _http_report import PAGE_KINDS, profile_top, render

from reconciliation.dynamo.local import free_port

THREADS = 8
STAFF = 8
# A person reads a page before opening the next: one second on average is a busy one (the
# staff of (b) are eight such people, not eight clients asking as fast as they can).
THINK_S = 1.0
# The web process's DynamoDB read timeout (``DDB_READ_TIMEOUT_S``, shipped at 2 s).
READ_TIMEOUT_S = 2.0
# (b)'s steady load: the acknowledgements' latency target is set at 50 pledges/s, a
# busy hour's rate, about a third of what this machine's intake takes flat out.
PACED_RPS = 50.0
PASSWORD = "bench-Password-2026!"
BODY = json.dumps({"donor_ref": "D-1", "fund": "BENCH", "amount": "10.00", "currency": "USD"})
QUEUES = ("stuck", "ambiguous", "cancelled", "mismatch")


class Intake:
    """Eight keep-alive HTTP clients posting pledges, 80 % new, 20 % replays."""

    def __init__(self, port: int, token: str):
        self.conns = [proxied(port) for _ in range(THREADS)]
        self.token = token
        self.committed: list[list[str]] = [[] for _ in range(THREADS)]
        self.wrong: list[str] = []
        # Answers that took more round trips after a read timeout: the SDK or the
        # protocol sent a call again, as it must (a cold JVM on a loaded machine can
        # take longer than the shipped timeout). Counted, never mistaken for the
        # protocol's own cost.
        self.timed_out: list[str] = []

    def one(self, thread: int, key: str, replay: bool) -> float:
        status, headers, body, seconds = self.conns[thread].request(
            "POST",
            "/api/v1/pledges",
            body=BODY.encode(),
            headers={
                "Authorization": f"Bearer {self.token}",
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            },
        )
        counted = timing(headers)
        expected = (200, 1) if replay else (201, 2)
        retried = (
            counted is not None
            and status == expected[0]
            and counted[0] > expected[1]
            and counted[1] >= READ_TIMEOUT_S * 1000
        )
        if retried:
            self.timed_out.append(f"{key}: {status} {counted}")
        elif (status, counted and counted[0]) != expected:
            self.wrong.append(f"{key}: {status} {counted} {body[:200]!r}")
        if status == expected[0] and not replay:
            self.committed[thread].append(key)
        return seconds


def run_mixed(  # noqa: PLR0913  (one bench phase's inputs, each from the run)
    write, committed, label: str, per_thread: int, stop=None, groups=None, rate: float = 0
) -> dict:
    """8 threads × ``per_thread`` requests (or until ``stop`` is set), every fifth one
    a replay of a key this thread committed: requests/s overall and per kind, and the
    CPU each process group in ``groups`` (name: pgid) and this process spent per request.
    With ``rate``, the threads together send that many requests a second, evenly spaced
    (a steady load); without, each sends its next as soon as the last is answered."""
    lat: dict[str, list[float]] = {"new": [], "replay": []}
    lock = threading.Lock()

    def worker(t: int) -> None:
        rng = random.Random(t)
        mine: dict[str, list[float]] = {"new": [], "replay": []}
        i = 0
        spacing = THREADS / rate if rate else 0.0
        due = time.perf_counter() + spacing * t / THREADS
        while (stop is None and i < per_thread) or (stop is not None and not stop.is_set()):
            replay = i % 5 == 4 and committed[t]
            key = rng.choice(committed[t]) if replay else f"{label}-{t}-{i}-{time.time_ns()}"
            mine["replay" if replay else "new"].append(write(t, key, bool(replay)))
            i += 1
            if spacing and stop is not None:
                # A thread behind its schedule (a slow answer) goes on from now: it never
                # sends a burst to catch up.
                now = time.perf_counter()
                due = max(due + spacing, now)
                stop.wait(due - now)
        with lock:
            for kind, values in mine.items():
                lat[kind].extend(values)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    groups = groups or {}
    cpu_before = {name: group_cpu_s(pgid) for name, pgid in groups.items()}
    client_before = time.process_time()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    total = len(lat["new"]) + len(lat["replay"])
    cpu = {name: group_cpu_s(pgid) - cpu_before[name] for name, pgid in groups.items()}
    cpu["client"] = time.process_time() - client_before
    return {
        **{f"cpu_ms_{name}": seconds * 1000 / total for name, seconds in cpu.items()},
        "rps": total / elapsed,
        "new_rps": len(lat["new"]) / elapsed,
        "replay_rps": len(lat["replay"]) / elapsed,
        "new_ms": median(lat["new"]) * 1000,
        "replay_ms": median(lat["replay"]) * 1000 if lat["replay"] else 0.0,
    }


def staff_load(
    port: int, users: list[str], paths: StaffPaths, stop, out: dict, think_s: float
) -> list:
    """Signed-in staff opening queue, case, worklist and pledge pages in turn until
    ``stop``, each reading a page for a while (exponential, mean ``think_s``) before the
    next, as a person does; returns once all are signed in (sign-in's password hash is
    not part of the load)."""
    lock = threading.Lock()
    ready = threading.Barrier(len(users) + 1)

    def worker(n: int) -> None:
        conn = proxied(port)
        try:
            sign_in(conn, users[n], PASSWORD)
        except AssertionError as exc:
            with lock:
                out.setdefault("errors", []).append(f"sign-in {users[n]}: {exc}")
            ready.abort()
            return
        ready.wait()
        rng = random.Random(100 + n)
        i = n  # each starts at another kind, so every kind is open at any time
        # Every person opens each kind once even when ``stop`` comes first: a short run on
        # a slow machine (the smoke run while profiling) still reports every kind.
        while not stop.is_set() or i - n < len(PAGE_KINDS):
            kind = PAGE_KINDS[i % len(PAGE_KINDS)][0]
            path = paths.path(kind, i // len(PAGE_KINDS) + n, rng)
            status, headers, _body, seconds = conn.request("GET", path)
            counted = timing(headers)
            with lock:
                if status != 200 or counted is None:
                    out.setdefault("errors", []).append(f"{path}: {status}")
                else:
                    out.setdefault(kind, []).append((seconds * 1000, counted[2], counted[0]))
            i += 1
            stop.wait(rng.expovariate(1 / think_s) if think_s > 0 else 0)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(len(users))]
    for thread in threads:
        thread.start()
    ready.wait()
    return threads


class StaffPaths:
    """Where the staff go: the seeded cases, and pledges the intake clients committed."""

    def __init__(self, case_ids: list[str], intake: Intake):
        self.case_ids = case_ids
        self.intake = intake

    def path(self, kind: str, turn: int, rng: random.Random) -> str:
        if kind == "queue":
            return f"/queues/{QUEUES[turn % len(QUEUES)]}/"
        if kind == "case":
            return f"/cases/{rng.choice(self.case_ids)}/"
        if kind == "worklist":
            return "/worklist/"
        keys = [k for mine in self.intake.committed for k in mine[:50]]
        return f"/pledges/bench/{rng.choice(keys)}/"


def under_load(  # noqa: PLR0913  (one bench phase's inputs, each from the run)
    server_port: int,
    intake: Intake,
    users,
    case_ids,
    seconds: float,
    think_s: float,
    *,
    alone: bool = False,
    rate: float = 0,
) -> dict:
    """(b): the staff's pages while the intake clients run flat out, or at a steady
    ``rate`` (requests/s), or ``alone`` (no intake; its committed pledges are still the
    pledge pages'), for the split between a page's own time and its wait for the cores
    the intake load keeps busy."""
    stop = threading.Event()
    pages: dict = {}
    staff = staff_load(server_port, users, StaffPaths(case_ids, intake), stop, pages, think_s)
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    if alone:
        stop.wait()
        mixed = {"rps": 0.0}
    else:
        mixed = run_mixed(intake.one, intake.committed, "load", 0, stop=stop, rate=rate)
    for thread in staff:
        thread.join()
    summary = {"intake_rps": mixed["rps"], "errors": pages.get("errors", [])[:5]}
    assert all(pages.get(kind) for kind, _ in PAGE_KINDS), summary
    for kind, _label in PAGE_KINDS:
        rows = pages.get(kind, [])
        wall = sorted(r[0] for r in rows)
        server = sorted(r[1] for r in rows)
        summary[kind] = {
            "n": len(rows),
            "wall_median": median(wall),
            "wall_p95": wall[int(len(wall) * 0.95)],
            "server_median": median(server),
            "server_p95": server[int(len(server) * 0.95)],
            "calls": sorted({r[2] for r in rows}),
            "calls_median": statistics.median(r[2] for r in rows),
        }
    return summary


def prepare(tmp: Path, engine, prefix: str, staff: int) -> tuple[dict, str, list[str]]:
    env = server_env(
        tmp, endpoint_url=engine.endpoint_url, prefix=prefix, port=free_port(), funds="BENCH:USD"
    )
    manage(env, "migrate", "--noinput")
    token = manage(env, "issue_api_token", "--tenant", "bench").strip().splitlines()[-1]
    users = [f"staff{n}" for n in range(staff)]
    for user in users:
        manage(env, "add_staff", user, "--role", "finance_staff", "--password", PASSWORD)
    return env, token, users


def seed_cases(size: int) -> list[str]:
    from queue_page import _items, seed

    from reconciliation.dynamo.client import dynamodb_client, table_names

    seed(dynamodb_client(), table_names(), size)
    now = datetime.now(UTC)
    return [_items(i, now)[1]["case_id"]["S"] for i in range(0, size, max(1, size // 400))]


def compare(  # noqa: PLR0913  (one bench phase's inputs, each from the run)
    intake, raw_one, trips, raw_committed, rounds: int, per_thread: int, groups
) -> dict:
    """Interleaved rounds of the same 80/20 load, HTTP and raw; the raw side's round
    trips are counted (2 per new pledge, 1 per replay)."""
    results: dict = {"http": [], "raw": []}
    for round_no in range(rounds):
        order = ("http", "raw") if round_no % 2 == 0 else ("raw", "http")
        for side in order:
            if side == "http":
                res = run_mixed(
                    intake.one, intake.committed, f"h{round_no}", per_thread, groups=groups
                )
            else:
                start = trips.count
                res = run_mixed(raw_one, raw_committed, f"r{round_no}", per_thread, groups=groups)
                n = THREADS * per_thread
                replays = THREADS * (per_thread // 5)
                assert trips.count - start == 2 * (n - replays) + replays
            results[side].append(res)
        print(round_no, {s: round(results[s][-1]["rps"], 1) for s in results}, flush=True)
    return results


def modelled_rtt(  # noqa: PLR0913  (one bench phase's inputs, each from the run)
    args, rtt_ms: float, env: dict, tmp: Path, engine, token: str, tables
) -> dict:
    """The same comparison with DynamoDB one modelled network hop away, as in production:
    a proxy in a process of its own (so neither side shares its GIL) delays every chunk
    by half of ``rtt_ms`` each way; another gunicorn and another raw client use it."""
    proxy = ProxyProcess(engine.port, rtt_ms / 2)
    server = Gunicorn(
        {**env, "DYNAMODB_ENDPOINT_URL": proxy.endpoint_url, "WEB_PORT": str(free_port())},
        tmp / f"gunicorn-rtt{rtt_ms:g}.log",
    )
    try:
        raw = raw_client(proxy.endpoint_url)
        trips = RoundTrips(raw)
        intake = Intake(server.port, token)
        committed: list[list[str]] = [[] for _ in range(THREADS)]

        def raw_one(t: int, key: str, replay: bool) -> float:
            started = time.perf_counter()
            assert raw_write(raw, tables, key) == ("COMPLETED" if replay else "CREATED")
            if not replay:
                committed[t].append(key)
            return time.perf_counter() - started

        run_mixed(intake.one, intake.committed, f"rtt{rtt_ms:g}-warm", args.warmup // 3)
        run_mixed(raw_one, committed, f"rtt{rtt_ms:g}-warm", args.warmup // 3)
        groups = {"gunicorn": server.proc.pid, "engine": engine.process.pid}
        results = compare(intake, raw_one, trips, committed, args.rounds, args.per_thread, groups)
        assert not intake.wrong, intake.wrong[:5]
        if intake.timed_out:
            print(f"answers sent again after a read timeout: {intake.timed_out[:5]}", flush=True)
        return results
    finally:
        server.stop()
        proxy.stop()


def main() -> None:  # noqa: PLR0915  (the bench's phases in order, each a call)
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=150, help="requests per thread per side")
    parser.add_argument("--per-thread", type=int, default=60)
    parser.add_argument("--load-s", type=float, default=20)
    parser.add_argument("--profile-s", type=float, default=20)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--staff", type=int, default=STAFF, help="signed-in staff in (b), (c)")
    parser.add_argument(
        "--think-s", type=float, default=THINK_S, help="mean time a person reads a page in (b)"
    )
    parser.add_argument(
        "--paced-rps",
        type=float,
        default=PACED_RPS,
        help="the steady intake load of (b)'s second table (requests/s)",
    )
    parser.add_argument(
        "--rtt-ms",
        default="4,20",
        help="also compare through a proxy adding each of these round trips (ms, comma-separated)",
    )
    parser.add_argument("--save", help="also write the results as JSON here")
    parser.add_argument("--baseline", help="JSON of an earlier run: before/after tables")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--render", help="no run: render this saved JSON (with --baseline), for --write"
    )
    parser.add_argument("--smoke", action="store_true", help="every part, a few requests each")
    args = parser.parse_args()
    if args.smoke:
        if args.write:
            parser.error("--smoke measures too little to write")
        args.rounds, args.warmup, args.per_thread, args.cases, args.staff = 1, 6, 5, 50, 2
        args.load_s = args.profile_s = 2.0
        args.think_s = 0.05
        args.rtt_ms = "4"
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        baseline = json.loads(Path(args.baseline).read_text()) if args.baseline else None
        report = render(saved, baseline)
        print(report)
        if args.write:
            write_section("http_intake", report)
        return
    prefix = f"bh{os.getpid()}-"
    tmp = Path(tempfile.mkdtemp(prefix="bench-http-"))
    # This process's Django shares the server's database (the decomposition posts
    # through Django in-process with the token issued for the server).
    os.environ.update(
        DDB_TABLE_PREFIX=prefix,
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        VAR_DIR=str(tmp / "var"),
        DJANGO_BEHIND_PROXY="1",
    )
    engine = start_engine()
    server = None
    try:
        case_ids = seed_cases(args.cases)
        env, token, users = prepare(tmp, engine, prefix, args.staff)
        server = Gunicorn(env, tmp / "gunicorn.log")
        raw = raw_client(engine.endpoint_url)
        trips = RoundTrips(raw)
        from reconciliation.dynamo.client import table_names

        tables = table_names()
        intake = Intake(server.port, token)
        raw_committed: list[list[str]] = [[] for _ in range(THREADS)]

        def raw_one(t: int, key: str, replay: bool) -> float:
            started = time.perf_counter()
            outcome = raw_write(raw, tables, key)
            assert outcome == ("COMPLETED" if replay else "CREATED"), outcome
            if not replay:
                raw_committed[t].append(key)
            return time.perf_counter() - started

        # Warm-up: both sides' connections, the workers' first requests, and the JVM,
        # whose CPU per request keeps falling for the first few thousand (JIT), in
        # alternating chunks so neither side runs against a colder engine.
        for chunk in range(3):
            run_mixed(intake.one, intake.committed, f"warm{chunk}", args.warmup // 3)
            run_mixed(raw_one, raw_committed, f"warm{chunk}", args.warmup // 3)
        groups = {"gunicorn": server.proc.pid, "engine": engine.process.pid}
        results = compare(
            intake, raw_one, trips, raw_committed, args.rounds, args.per_thread, groups
        )
        assert not intake.wrong, intake.wrong[:5]
        if intake.timed_out:
            print(f"answers sent again after a read timeout: {intake.timed_out[:5]}", flush=True)
        rtt_results = {
            rtt: modelled_rtt(args, rtt, env, tmp, engine, token, tables)
            for rtt in (float(x) for x in args.rtt_ms.split(",") if x.strip())
        }
        load = under_load(server.port, intake, users, case_ids, args.load_s, args.think_s)
        load_paced = under_load(
            server.port, intake, users, case_ids, args.load_s, args.think_s, rate=args.paced_rps
        )
        load_alone = under_load(
            server.port, intake, users, case_ids, args.load_s, args.think_s, alone=True
        )
        print(json.dumps(load, indent=1), flush=True)
        server.stop()
        server = None
        profile = profile_run(tmp, env, users, case_ids, token, args.profile_s, args.think_s)
        layers = decompose(token, raw, tables, **({"n": 10, "rounds": 1} if args.smoke else {}))
        print(json.dumps(layers), flush=True)
        # The decomposition's in-process answers are buffered for the request log: written
        # now, while the engine still answers, not at exit after it stopped.
        from reconciliation.claims.request_log_buffer import request_log_close

        request_log_close()
    finally:
        if server is not None:
            server.stop()
        engine.stop()
    result = {
        "rounds": results,
        "rounds_rtt": rtt_results,
        "load": load,
        "load_paced": load_paced,
        "load_alone": load_alone,
        "profile": profile,
        "layers": layers,
        "machine": machine_line(),
        "load_avg": os.getloadavg()[0],
        "args": vars(args),
    }
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1))
    baseline = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    report = render(result, baseline)
    print(report)
    shutil.rmtree(tmp, ignore_errors=True)
    if args.write:
        write_section("http_intake", report)


def profile_run(  # noqa: PLR0913  (one bench phase's inputs, each from the run)
    tmp: Path, env: dict, users, case_ids, token: str, seconds: float, think_s: float
) -> dict:
    """(b)'s load against a gunicorn whose workers profile every request."""
    folder = tmp / "profiles"
    folder.mkdir()
    profiled_env = {
        **env,
        "BENCH_PROFILE_DIR": str(folder),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)]),
    }
    server = Gunicorn(profiled_env, tmp / "gunicorn-profiled.log", config="_gunicorn_profile")
    try:
        intake = Intake(server.port, token)
        run_mixed(intake.one, intake.committed, "pwarm", 20)
        under_load(server.port, intake, users, case_ids, seconds, think_s)
    finally:
        server.stop()
    keep = os.environ.get("BENCH_KEEP_PROFILES")
    if keep:
        shutil.copytree(folder, keep, dirs_exist_ok=True)
    return {kind: profile_top(sorted(folder.glob(f"{kind}-*.pstats"))) for kind in ("api", "pages")}


if __name__ == "__main__":
    main()
