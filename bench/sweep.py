"""Read units consumed by one stuck-claim sweep, as the table grows.

    python bench/sweep.py [--sizes 1000,10000,100000] [--stuck 10] [--write]

For each size the table holds that many COMPLETED claims plus 10 freshly stuck ones;
one sweep runs with ReturnConsumedCapacity on every call and its read units are summed.
The same is measured for a Scan-based sweep (Scan + filter on status and expiry), the
design the sparse ``pending_by_expiry`` index exists to avoid.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

from _common import machine_line, start_engine, write_section

from reconciliation.stores import every_store, home_store


def seed_completed(client, table: str, start: int, stop: int) -> None:
    now = int(time.time())

    def batch(lo: int) -> None:
        items = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": f"bench#create_pledge#done-{i}"},
                        "status": {"S": "COMPLETED"},
                        "version": {"N": "2"},
                        "expires_at": {"N": str(now + 86400)},
                        "purge_at": {"N": str(now + 8 * 86400)},
                        "request_token": {"S": f"token-{i:036d}"[:36]},
                        "response": {"S": '{"amount": "10.00", "intent_id": "x"}'},
                    }
                }
            }
            for i in range(lo, min(lo + 25, stop))
        ]
        request = {table: items}
        while request:
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(batch, range(start, stop, 25)))


def make_stuck(n: int, tag: str) -> None:
    from reconciliation import clock
    from reconciliation.actors import Actor, Role
    from reconciliation.claims.intake import pledge_submit
    from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
    from reconciliation.claims.request import parse_fields
    from reconciliation.simulation import faults
    from reconciliation.simulation.fault_stores import FaultStores

    actor = Actor(username="api:bench", role=Role.API)
    request = parse_fields(
        {"donor_ref": "D-1", "fund": "BENCH", "amount": "10.00", "currency": "USD"}
    )
    # The crash point is skipped on the shared stores: these go through stores of their own.
    crashing = FaultStores()
    # Crashed ten minutes ago: lease and grace are over.
    with crashing.injected({"crash_after_claim": 1.0}), clock.travel(-600):
        for i in range(n):
            key = f"stuck-{tag}-{i}"
            with contextlib.suppress(faults.SimulatedCrash):
                pledge_submit(
                    tenant="bench",
                    idempotency_key=key,
                    request=request,
                    actor=actor,
                    store=crashing.home(claim_pk("bench", OPERATION_CREATE_PLEDGE, key)),
                )


def scan_sweep_units(client, table: str) -> float:
    now = int(time.time())
    units, kwargs = (
        0.0,
        {
            "TableName": table,
            "FilterExpression": "#s = :p AND expires_at < :t",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":p": {"S": "PENDING"}, ":t": {"N": str(now)}},
            "ConsistentRead": True,
            "ReturnConsumedCapacity": "TOTAL",
        },
    )
    while True:
        response = client.scan(**kwargs)
        units += response["ConsumedCapacity"]["CapacityUnits"]
        if "LastEvaluatedKey" not in response:
            return units
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--stuck", type=int, default=10)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    engine = start_engine()
    try:
        from reconciliation.casework.sweeps import sweep_stuck_claims
        from reconciliation.dynamo import capacity
        from reconciliation.dynamo.client import dynamodb_client, table_names

        client, table = dynamodb_client(), table_names().idempotency_keys
        rows, seeded = [], 0
        for size in sizes:
            started = time.monotonic()
            seed_completed(client, table, seeded, size)
            seeding = time.monotonic() - started
            seeded = size
            make_stuck(args.stuck, str(size))
            scan_units = scan_sweep_units(client, table)
            with capacity.instrumented(), capacity.measuring() as spent:
                report = sweep_stuck_claims(every_store(), home=home_store)
            assert len(report.opened) == args.stuck, report.lines()
            rows.append((size, spent.read, scan_units, seeding))
            print(
                f"{size}: sweep {spent.read:.1f} RCU, scan {scan_units:.1f} RCU "
                f"(seeded in {seeding:.0f}s)",
                flush=True,
            )
    finally:
        engine.stop()
    smallest, largest = rows[0], rows[-1]
    ratio = largest[1] / smallest[1]
    scan_ratio = largest[2] / smallest[2]
    report = "\n".join(
        [
            "## Stuck-claim sweep (`bench/sweep.py`)",
            "",
            f"DynamoDB Local 3.3.1; {args.stuck} stuck claims among N completed ones; read "
            "units summed from ReturnConsumedCapacity of every call the sweep makes (16 index "
            "Queries, one consistent GetItem per candidate claim and per pledge, the case "
            "existence checks), against a Scan-based sweep of the same table; "
            f"{machine_line()}.",
            "",
            "| completed claims | sweep RCU (index) | Scan-based RCU |",
            "| ---: | ---: | ---: |",
            *(f"| {size:,} | {units:.1f} | {scan:.1f} |" for size, units, scan, _ in rows),
            "",
            f"Largest/smallest: index sweep {ratio:.2f}× (target ≤ 1.1: "
            f"{'met' if ratio <= 1.1 else 'NOT met'}); Scan-based {scan_ratio:.1f}× (linear in "
            "the table).",
        ]
    )
    print(report)
    if args.write:
        write_section("sweep", report)


if __name__ == "__main__":
    main()
