"""What each index alternative saves per new pledge and what the reads that need the index
then pay, on DynamoDB Local (engine-reported ReturnConsumedCapacity, INDEXES detail).

    python bench/index_alternatives.py [--alternatives 0,1,2a,2b,3a,3b,3c,4,5]
        [--sizes 1000,5000] [--day-sizes 1000] [--sample 20] [--explore KEYS]
        [--save FILE.json] [--render FILE.json] [--write]

Each alternative (bench/_index_patches.py) is a patch of the write path applied with
``unittest.mock.patch``, on tables of its own (``ia<key>-``). Per alternative:

- write units of ``pledge_submit`` for a new pledge, table and index, averaged over
  ``--sample`` pledges on fresh tables (and again after the bulk, for a growing item);
- for the pending-index alternatives: with 0 and ``--sizes`` completed pledges (leases over),
  plus 10 freshly stuck claims per step, one stuck-claim sweep now and one after the
  completed horizon (``CLAIM_COMPLETED_TTL_S`` + 1 h): read units, calls, claims examined;
- a whole day read back from the by-day index (or the alternative's other way), as the
  export reads it: 8 shard Queries of ``Limit=500``, plus what the alternative needs per
  event (eventually consistent BatchGetItem, 100 keys a request);
- the fault explorer at depth 1, in this process with the patches applied, for every
  alternative that saves units and keeps those reads flat (and any named by ``--explore``).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

from _common import machine_line, start_engine, write_section

alt = None  # bench/_index_patches.py, imported once Django is set up (main)

STUCK = 10
BASE_AGE_S = 120  # completed pledges were claimed 2 min ago: their leases have run out
READS = {"GetItem", "Query", "Scan", "BatchGetItem"}
OPS = READS | {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


class Meter:
    """Engine-reported units of every call on ``client`` while on: reads, and writes split
    per operation into table and index units (``ReturnConsumedCapacity=INDEXES``)."""

    def __init__(self, client):
        self.lock = threading.Lock()
        self.on = False
        self.reset()
        client.meta.events.register("before-parameter-build.dynamodb", self._ask)
        client.meta.events.register("after-call.dynamodb", self._record)

    def reset(self) -> None:
        self.read = 0.0
        self.calls: collections.Counter = collections.Counter()
        self.writes: collections.Counter = collections.Counter()  # (op, "table"|"index")

    @staticmethod
    def _ask(params, model, **_kwargs) -> None:
        if model.name in OPS:
            params["ReturnConsumedCapacity"] = "INDEXES"

    def _record(self, parsed, model, **_kwargs) -> None:
        if not self.on or not isinstance(parsed, dict):
            return
        consumed = parsed.get("ConsumedCapacity")
        entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        with self.lock:
            self.calls[model.name] += 1
            for entry in entries:
                total = entry.get("CapacityUnits", 0.0)
                if model.name in READS:
                    self.read += total
                    continue
                index = sum(
                    i.get("CapacityUnits", 0.0)
                    for i in entry.get("GlobalSecondaryIndexes", {}).values()
                )
                self.writes[(model.name, "table")] += total - index
                self.writes[(model.name, "index")] += index

    def __enter__(self) -> Meter:
        self.reset()
        self.on = True
        return self

    def __exit__(self, *exc_info) -> None:
        self.on = False

    @property
    def write(self) -> float:
        return sum(self.writes.values())


# --- the traffic ---------------------------------------------------------------------------


def _request():
    from reconciliation.claims.request import parse_fields

    return parse_fields({"donor_ref": "D-1", "fund": "BENCH", "amount": "10.00", "currency": "USD"})


def submit(key: str):
    from reconciliation.actors import Actor, Role
    from reconciliation.claims.intake import pledge_submit
    from reconciliation.claims.models import pledge_home
    from reconciliation.claims.outcomes import OutcomeKind

    outcome = pledge_submit(
        pledge_home("bench", key),
        tenant="bench",
        idempotency_key=key,
        request=_request(),
        actor=Actor("api:bench", Role.API),
    )
    assert outcome.kind == OutcomeKind.CREATED, outcome
    return outcome


def sample_units(meter: Meter, tag: str, n: int) -> dict:
    """Write units per new pledge, split as claim put / commit × table / index."""
    with meter:
        for i in range(n):
            submit(f"sample-{tag}-{i}")
    return {f"{op}/{part}": units / n for (op, part), units in meter.writes.items()}


def make_completed(start: int, stop: int) -> None:
    from reconciliation import clock

    with clock.travel(-BASE_AGE_S), ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: submit(f"done-{i}"), range(start, stop)))


def make_stuck(tag: str) -> None:
    """Claims whose worker died ten minutes ago, as bench/sweep.py makes them."""
    import contextlib

    from reconciliation import clock
    from reconciliation.actors import Actor, Role
    from reconciliation.claims.intake import pledge_submit
    from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
    from reconciliation.simulation import faults
    from reconciliation.simulation.fault_stores import FaultStores

    # The crash point is skipped on the shared stores: these go through stores of their own.
    crashing = FaultStores()
    with crashing.injected({"crash_after_claim": 1.0}), clock.travel(-600):
        for i in range(STUCK):
            key = f"stuck-{tag}-{i}"
            with contextlib.suppress(faults.SimulatedCrash):
                pledge_submit(
                    tenant="bench",
                    idempotency_key=key,
                    request=_request(),
                    actor=Actor("api:bench", Role.API),
                    store=crashing.home(claim_pk("bench", OPERATION_CREATE_PLEDGE, key)),
                )


def sweep(meter: Meter, ahead_s: int) -> dict:
    from reconciliation import clock
    from reconciliation.casework.sweeps import sweep_stuck_claims
    from reconciliation.stores import every_store, home_store

    with clock.travel(ahead_s), meter:
        report = sweep_stuck_claims(every_store(), home=home_store)
    return {
        "rcu": meter.read,
        "calls": sum(meter.calls.values()),
        "examined": report.candidates,
        "completed_skipped": report.skipped,
        "cases": len(report.opened),
    }


# --- reading a day back -----------------------------------------------------------------------


def _query_all(client, table: str, index: str, key: str, value: str) -> list[dict]:
    kwargs = {
        "TableName": table,
        "IndexName": index,
        "KeyConditionExpression": "#k = :v",
        "ExpressionAttributeNames": {"#k": key},
        "ExpressionAttributeValues": {":v": {"S": value}},
        "Limit": 500,  # the export's page (reconciliation/audit/day_index.py)
    }
    items: list[dict] = []
    while True:
        page = client.query(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _batch_get(client, table: str, keys: list[dict]) -> list[dict]:
    """Eventually consistent BatchGetItem, 100 keys a request (the export's reads may be)."""
    found: list[dict] = []
    for start in range(0, len(keys), 100):
        request = {table: {"Keys": keys[start : start + 100]}}
        while request:
            answer = client.batch_get_item(RequestItems=request)
            found.extend(answer["Responses"].get(table, []))
            request = answer.get("UnprocessedKeys") or {}
    return found


def read_day(meter: Meter, key: str, day: date) -> dict:
    """Every event of ``day`` as alternative ``key`` finds it, complete (all attributes)."""
    from reconciliation.claims.models import intent_id_for
    from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS
    from reconciliation.stores import first_store, pledge_stream

    store = first_store()
    client, names = store.client, store.tables
    shards = [f"{day.isoformat()}#{n}" for n in range(AUDIT_DAY_SHARDS)]
    with meter:
        events = [
            item
            for s in shards
            for item in _query_all(client, names.audit_events, "by_day", "day_shard", s)
        ]
        if key == "4":  # keys only: every event is read again from the table
            wanted = [{"stream": e["stream"], "seq": e["seq"]} for e in events]
            events = _batch_get(client, names.audit_events, wanted)
        intents: list[str] = []
        if key == "3a":
            for s in shards:
                found = _query_all(client, names.pledges, "by_day", "day_shard", s)
                intents += [i["intent_id"]["S"] for i in found]
        if key == "3b":
            for s in shards:
                found = _query_all(
                    client, names.idempotency_keys, "receipts_by_day", "receipt_day", s
                )
                for item in found:
                    tenant, _op, idempotency_key = item["pk"]["S"].split("#", 2)
                    intents.append(intent_id_for(tenant, idempotency_key))
        if key == "3c":
            for s in shards:
                bucket = client.get_item(
                    TableName=names.ledger, Key={"fund": {"S": f"{alt.BUCKET_PREFIX}{s}"}}
                ).get("Item", {})
                intents += bucket.get("intents", {}).get("SS", [])
        if intents:
            wanted = [{"stream": {"S": pledge_stream(i)}, "seq": {"N": "1"}} for i in intents]
            events += _batch_get(client, names.audit_events, wanted)
    receipts = sum(1 for e in events if e["stream"]["S"].startswith("PLEDGE#"))
    return {
        "events": len(events),
        "receipts": receipts,
        "calls": sum(meter.calls.values()),
        "per_event_calls": meter.calls["BatchGetItem"] + meter.calls["GetItem"],
        "rcu": meter.read,
    }


def real_export(meter: Meter, day: date) -> dict:
    """Today's CSV export of ``day`` (the code the by-day reader stands for), measured."""
    import tempfile
    from pathlib import Path

    from reconciliation.actors import Actor, Role
    from reconciliation.audit.export.delivery import export_to_file
    from reconciliation.audit.export.run import ExportAsk
    from reconciliation.audit.filters import AuditFilters, FilterAsk
    from reconciliation.stores import first_store

    filters = AuditFilters.build(
        FilterAsk(since=day.isoformat(), until=(day + timedelta(days=1)).isoformat()), max_days=None
    )
    with tempfile.TemporaryDirectory() as tmp, meter:
        core = export_to_file(
            ExportAsk(
                filters, "csv", Actor("bench", Role.AUDITOR, "bench@example.org"), first_store()
            ),
            out_path=Path(tmp) / "day.csv",
        )
    return {"rows": core["row_count"], "rcu": meter.read, "calls": dict(meter.calls)}


# --- one alternative --------------------------------------------------------------------------


def measure(meter: Meter, key: str, args) -> dict:
    from django.conf import settings

    from reconciliation import clock

    sweeps = key in alt.SWEEP_ALTERNATIVES
    sizes = [0, *(args.sizes if sweeps else args.day_sizes)]
    day = (clock.now() - timedelta(seconds=BASE_AGE_S)).date()
    out: dict = {"units": sample_units(meter, "first", args.sample), "rows": []}
    have = 0
    for size in sizes:
        make_completed(have, size)
        have = size
        row: dict = {"size": size}
        if sweeps:
            make_stuck(str(size))
            row["now"] = sweep(meter, 0)
            row["later"] = sweep(meter, settings.CLAIM_COMPLETED_TTL_S + 3600)
        row["day"] = read_day(meter, key, day)
        out["rows"].append(row)
        print(f"  {key} @ {size:,}: {row}", flush=True)
    out["units_after"] = sample_units(meter, "after", args.sample)
    if key == "0":
        out["export"] = real_export(meter, day)
    return out


def explore_with(key: str, endpoint_url: str) -> dict:
    """The fault explorer at depth 1 with alternative ``key`` applied, in this process: its
    last line and, per invariant broken, how many scenarios broke it and one example."""
    from reconciliation.simulation.explorer import ExploreConfig, explore

    with alt.applied(key):
        exploration = explore(ExploreConfig(workers=0, endpoint_url=endpoint_url))
    broken: dict[str, list] = {}
    for result in exploration.violations:
        for problem in result.problems:
            seen = broken.setdefault(problem.invariant, [0, f"{result.scenario}: {problem}"])
            seen[0] += 1
    return {"summary": exploration.summary(), "seconds": exploration.seconds, "broken": broken}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alternatives", default="0,1,2a,2b,3a,3b,3c,4,5")
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--day-sizes", default="1000")
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--explore", default="", help="also explore these (comma list)")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--save", default="", help="also keep the figures in this JSON file")
    parser.add_argument("--render", default="", help="only render figures a --save kept")
    args = parser.parse_args()
    if args.render:
        report(args, json.loads(Path(args.render).read_text()))
        return
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.day_sizes = [int(s) for s in args.day_sizes.split(",")]
    keys = args.alternatives.split(",")
    assert keys[0] == "0", "today's code is measured first: every saving is against it"
    # The explorer's API token lives in Django's own database: a private one.
    os.environ["DATABASE_URL"] = "sqlite://:memory:"
    engine = start_engine()
    # Every stuck claim opens a case, which logs a line: the figures are the output here.
    logging.getLogger("reconciliation").setLevel(logging.WARNING)
    try:
        global alt
        import _index_patches as alt
        from _index_report import judge
        from django.core.management import call_command
        from django.test.utils import override_settings

        from reconciliation.dynamo.client import dynamodb_client, table_names
        from reconciliation.dynamo.tables import ensure_tables

        meter = Meter(dynamodb_client())
        results: dict[str, dict] = {}
        for key in keys:
            started = time.monotonic()
            with override_settings(DDB_TABLE_PREFIX=f"ia{key}-"), alt.applied(key):
                ensure_tables(dynamodb_client(), table_names())
                results[key] = measure(meter, key, args)
            print(f"{key}: {time.monotonic() - started:.0f} s", flush=True)
        verdicts = {k: judge(results, k) for k in keys}
        wanted = [k for k in keys if verdicts[k]["qualifies"]]
        wanted += [k for k in args.explore.split(",") if k in keys and k not in wanted]
        explored = {}
        if wanted:
            call_command("migrate", verbosity=0, interactive=False)
        for key in wanted:  # last: the explorer replaces the clients (and the meter's hooks)
            explored[key] = explore_with(key, engine.endpoint_url)
            print(f"  explorer with {key}: {explored[key]}", flush=True)
    finally:
        engine.stop()
    figures = {"results": results, "verdicts": verdicts, "explored": explored}
    report(args, {**figures, "sample": args.sample, "machine": machine_line()})


def report(args, figures: dict) -> None:
    if args.render:  # no engine: Django only for the modules the report imports
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
        django.setup()
    from _index_report import render

    if args.save:
        Path(args.save).write_text(json.dumps(figures, indent=1))
    text = render(figures, figures["sample"], figures["machine"])
    print(text)
    if args.write:
        write_section("index_alternatives", text)


if __name__ == "__main__":
    main()
