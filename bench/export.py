"""Audit export throughput and memory on DynamoDB Local: CSV export against a bare
paginated Query loop over the same ``by_day`` index, at growing sizes.

    python bench/export.py [--sizes 10000,100000,1000000] [--rounds 2] [--threads 6]
                           [--budget-min 20] [--write]

Events are generated straight into DynamoDB Local with BatchWriteItem (25 a request,
several threads), cumulatively: 10 000, then 90 000 more, and so on, spread over ten
days. At each size every measurement runs in a fresh subprocess, interleaved (bare,
export, bare, export …): rows/s are medians, peak RSS is the child's ``ru_maxrss``.
The bare loop reads the same day shards with the same page size and only counts items;
the export decodes every item, writes CSV to a file, hashes it, tracks chain heads and
writes the signed manifest and the ``EXPORT#`` event. A size whose projected generation
time exceeds the budget is skipped and the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta

from _common import ROOT, machine_line, start_engine, write_section

from reconciliation.audit.day_index import EXPORT_PAGE_LIMIT as PAGE_LIMIT
from reconciliation.stores import first_store

DAYS = 10
PREFIX = "bench-export-"


def first_day() -> date:
    return date(2026, 1, 1)


def bench_env(endpoint: str) -> dict:
    return {
        **os.environ,
        "DYNAMODB_ENDPOINT_URL": endpoint,
        "DDB_TABLE_PREFIX": PREFIX,
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        # Batch work, not a request path: generous timeouts for a loaded engine, the same
        # for every variant.
        "DDB_READ_TIMEOUT_S": "60",
        "DDB_CONNECT_TIMEOUT_S": "5",
        "DDB_MAX_ATTEMPTS": "5",
        "PYTHONPATH": str(ROOT),
    }


# --- generation -------------------------------------------------------------------------


def generate(count: int, *, tag: str, threads: int) -> float:
    """Write ``count`` fresh chained events; return the seconds it took."""
    from audit_synthetic import synthetic_events

    from reconciliation.audit.repository import AuditRepository
    from reconciliation.stores import first_store

    audit = AuditRepository(first_store())
    start = datetime.combine(first_day(), datetime.min.time(), tzinfo=UTC)
    slots = threading.Semaphore(threads * 4)  # bounded backlog: memory stays flat
    errors: list[BaseException] = []

    def put(batch: list[dict]) -> None:
        try:
            audit.batch_put(batch)
        except BaseException as exc:
            errors.append(exc)
        finally:
            slots.release()

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        batch: list[dict] = []
        for event in synthetic_events(
            count, start=start, days=DAYS, seed=hash(tag) % 10_000, tag=tag
        ):
            batch.append(event)
            if len(batch) == 25:
                slots.acquire()
                pool.submit(put, batch)
                batch = []
        if batch:
            slots.acquire()
            pool.submit(put, batch)
    if errors:
        raise errors[0]
    return time.perf_counter() - started


# --- children: one measurement each, in a fresh process ------------------------------------


def child(kind: str) -> None:
    import django

    django.setup()
    from reconciliation.actors import Actor, Role
    from reconciliation.audit.filters import AuditFilters, FilterAsk
    from reconciliation.dynamo.client import dynamodb_client, table_names

    filters = AuditFilters.build(
        FilterAsk(
            since=first_day().isoformat(), until=(first_day() + timedelta(days=DAYS)).isoformat()
        ),
        max_days=None,
    )
    started = time.perf_counter()
    rows = 0
    if kind == "bare":
        client = dynamodb_client()
        table = table_names().audit_events
        for day in filters.days():
            for shard in range(8):
                kwargs = {
                    "TableName": table,
                    "IndexName": "by_day",
                    "KeyConditionExpression": "day_shard = :d",
                    "ExpressionAttributeValues": {":d": {"S": f"{day.isoformat()}#{shard}"}},
                    "Limit": PAGE_LIMIT,
                }
                while True:
                    response = client.query(**kwargs)
                    rows += len(response["Items"])
                    if "LastEvaluatedKey" not in response:
                        break
                    kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
    else:
        from reconciliation.audit.export.delivery import export_to_file
        from reconciliation.audit.export.run import ExportAsk

        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "export.csv")
            if kind == "export-sequential":
                import reconciliation.audit.export.run as audit_export

                original = audit_export.ExportRun.__post_init__

                def sequential(self) -> None:
                    self.prefetch = False
                    original(self)

                audit_export.ExportRun.__post_init__ = sequential
            core = export_to_file(
                ExportAsk(
                    filters, "csv", Actor("bench", Role.AUDITOR, "bench@example.org"), first_store()
                ),
                out_path=__import__("pathlib").Path(out),
            )
            rows = core["row_count"]
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"kind": kind, "rows": rows, "seconds": seconds, "peak_kb": peak_kb}))


def measure(kind: str, env: dict) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--child", kind],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- main -----------------------------------------------------------------------------------


def main() -> None:  # noqa: PLR0915  (the script's steps in order: parse, seed, measure, report)
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--budget-min", type=float, default=20.0, help="generation budget")
    parser.add_argument("--sequential", action="store_true", help="also run without prefetch")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--note", default="", help="a sentence on the conditions of the run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    os.environ.update({k: v for k, v in bench_env("").items() if k != "DYNAMODB_ENDPOINT_URL"})
    # A terminated run still stops its engine (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    engine = start_engine()
    env = bench_env(engine.endpoint_url)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict] = []
    skipped: list[str] = []
    have = 0
    generation_s = 0.0
    rate = None
    try:
        for size in sizes:
            missing = size - have
            if rate and missing / rate > args.budget_min * 60:
                fits = have + int(rate * args.budget_min * 60 * 0.9) // 50_000 * 50_000
                skipped.append(
                    f"{size:,}: generating {missing:,} more events at the measured "
                    f"{rate:,.0f} events/s would take {missing / rate / 60:.0f} min, over the "
                    f"{args.budget_min:g} min budget"
                    + (f"; measured {fits:,} instead, the largest that fits" if fits > have else "")
                )
                if fits <= have:
                    continue
                size, missing = fits, fits - have
            seconds = generate(missing, tag=f"s{size}-", threads=args.threads)
            generation_s += seconds
            rate = missing / seconds
            have = size
            print(f"generated {missing:,} events in {seconds:.0f} s ({rate:,.0f}/s)", flush=True)
            # The no-prefetch variant is context, not a target: measured up to 100 000 only.
            sequential = args.sequential and size <= 100_000
            kinds = ["bare", "export"] + (["export-sequential"] if sequential else [])
            runs: dict[str, list[dict]] = {k: [] for k in kinds}
            if not results:
                # DynamoDB Local's JIT is cold at first: one untimed pass of each.
                for kind in kinds:
                    measure(kind, env)
            for round_no in range(args.rounds):
                # Alternate who goes first, so drift on a busy machine hits both alike.
                for kind in kinds if round_no % 2 == 0 else kinds[::-1]:
                    run = measure(kind, env)
                    assert run["rows"] == size, run
                    runs[kind].append(run)
                    print(f"  {size:,} {kind}: {run}", flush=True)
            results.append({"size": size, "gen_rate": rate, "gen_s": seconds, "runs": runs})
    finally:
        engine.stop()
    report = render(results, skipped, args, generation_s)
    print(report)
    if args.write:
        write_section("export", report)


def render(results: list[dict], skipped: list[str], args, generation_s: float) -> str:
    def rate(runs: list[dict]) -> float:
        return statistics.median(r["rows"] / r["seconds"] for r in runs)

    def peak_mb(runs: list[dict]) -> float:
        return max(r["peak_kb"] for r in runs) / 1024

    sequential = args.sequential
    head = "| events | generation (events/s) | bare Query rows/s | export rows/s | ratio |"
    rule = "| ---: | ---: | ---: | ---: | ---: |"
    if sequential:
        head += " export, no prefetch rows/s | ratio |"
        rule += " ---: | ---: |"
    head += " export peak RSS | bare peak RSS |"
    rule += " ---: | ---: |"
    lines = [head, rule]
    for r in results:
        bare, export = rate(r["runs"]["bare"]), rate(r["runs"]["export"])
        row = (
            f"| {r['size']:,} | {r['gen_rate']:,.0f} | {bare:,.0f} | {export:,.0f} | "
            f"{export / bare:.2f} |"
        )
        if sequential and r["runs"].get("export-sequential"):
            seq = rate(r["runs"]["export-sequential"])
            row += f" {seq:,.0f} | {seq / bare:.2f} |"
        elif sequential:
            row += " – | – |"
        row += f" {peak_mb(r['runs']['export']):.0f} MB | {peak_mb(r['runs']['bare']):.0f} MB |"
        lines.append(row)

    targets = ["", "| target | met | measured |", "| --- | --- | --- |"]
    ratios = [
        rate(r["runs"]["export"]) / rate(r["runs"]["bare"]) for r in results if r["runs"]["bare"]
    ]
    if ratios:
        worst = min(ratios)
        targets.append(
            f"| export rows/s ≥ 0.8 × bare Query loop | {'yes' if worst >= 0.8 else 'NO'} | "
            f"lowest ratio {worst:.2f} |"
        )
    large = [r for r in results if r["size"] >= 100_000]
    if len(large) >= 2:
        low, high = peak_mb(large[0]["runs"]["export"]), peak_mb(large[-1]["runs"]["export"])
        growth = (high - low) / low
        targets.append(
            f"| export peak RSS flat within 15% from {large[0]['size']:,} to "
            f"{large[-1]['size']:,} | {'yes' if abs(growth) <= 0.15 else 'NO'} | "
            f"{low:.0f} MB → {high:.0f} MB ({growth:+.1%}) |"
        )
    else:
        targets.append("| export peak RSS flat from 100 000 up | not measured | one size only |")

    notes = [
        "## Export (`bench/export.py`)",
        "",
        f"DynamoDB Local 3.3.1 in memory, {machine_line()}. Events are synthetic but real "
        f"(hash-chained `PLEDGE#`/`CASE#` streams built by `audit_event_build`), spread over "
        f"{DAYS} days and written with BatchWriteItem from {args.threads} threads; each size "
        "adds to the previous one. Every figure comes from a fresh subprocess; rows/s are "
        f"medians of {args.rounds} interleaved rounds (alternating which variant goes first, "
        "after one untimed warm-up pass of each), peak RSS the largest `ru_maxrss`. "
        f"Both variants read the 8 `by_day` shards of each day with `Limit={PAGE_LIMIT}`; the "
        "bare loop only counts items, the export decodes them, merges the shards in time "
        "order, writes CSV to a file, hashes it, keeps chain heads in a temporary SQLite "
        "table and writes the signed manifest and the `EXPORT#` event. The export asks for "
        "each shard's next page in a background thread while it encodes the current one "
        "(at most two pages per shard in memory); the bare loop is sequential. The "
        "“no prefetch” column is the same export reading one page at a time, for context."
        + (f" {args.note}" if args.note else ""),
        "",
        *lines,
        *targets,
        "",
        f"Generating the data took {generation_s / 60:.1f} min in all.",
    ]
    if skipped:
        notes += ["", "Not measured here:", *[f"- {s}" for s in skipped]]
    return "\n".join(notes)


if __name__ == "__main__":
    main()
