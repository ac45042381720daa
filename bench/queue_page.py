"""The queue page (50 rows) as the table grows: DynamoDB read units per page and server
render time against the raw Query the page issues.

    python bench/queue_page.py [--sizes 1000,100000] [--rounds 40] [--write]

For each size the tables hold that many claims and that many open cases (70 % in the
measured queue, Stuck PENDING; the rest spread over the other case types), written
with BatchWriteItem from 8 threads. Then, interleaved per round after a warm-up:

- the raw ``Query`` of the ``open_by_queue`` index that the page issues (boto3, the same
  key condition, ``Limit`` 50, ``ReturnConsumedCapacity``);
- ``queue_page`` (the selector);
- the view answering htmx (the ``#results`` fragment: the table, one Query);
- the view answering a full page (tabs with counts: the Query plus one BatchGetItem);
- the "Load more" fragment (the next 50 rows through the opaque cursor);
- the same views sorted by amount (largest first, the ``open_by_amount`` index) and by
  fund (``open_by_fund``), and newest first (``open_by_queue`` read backwards), each
  against the raw Query of its index. The full page also shows the amount at risk per
  currency, from the counter items it already reads (no extra call).

Views are called in-process through ``RequestFactory`` with a signed-in finance_staff
user (no middleware), so the time is the server's own: DynamoDB round trips plus Python
and template work.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

from _common import RoundTrips, machine_line, median, start_engine, write_section

from reconciliation.stores import first_store

MEASURED = "STUCK_PENDING"
SPREAD = (
    ("STUCK_PENDING", 0.70),
    ("AMBIGUOUS_TIMEOUT", 0.10),
    ("CANCELLED_TRANSACTION", 0.15),
    ("TOKEN_MISMATCH", 0.05),
)
FUNDS = ("GENERAL", "BUILDING", "SCHOLARSHIP", "RELIEF")
PAGE = 50


def _case_type(i: int) -> str:
    point = (i * 0.6180339887) % 1.0  # deterministic, evenly spread
    edge = 0.0
    for name, share in SPREAD:
        edge += share
        if point < edge:
            return name
    return SPREAD[-1][0]


def _items(i: int, now: datetime) -> tuple[dict, dict]:
    """One claim item and its open case, as the write path would store them."""
    from reconciliation.audit.repository import GENESIS_HASH
    from reconciliation.cases.models import (
        Case,
        CaseRequest,
        ClientOutcome,
        Evidence,
        case_id_for,
        case_to_item,
    )
    from reconciliation.cases.vocabulary import ErrorKind
    from reconciliation.dynamo.cancellation import DecodedReason
    from reconciliation.dynamo.items import to_item

    rng = random.Random(i)
    key = f"bench-{i:07d}"
    pk = f"acme#create_pledge#{key}"
    opened = now - timedelta(seconds=rng.randint(60, 48 * 3600))
    opened_at = opened.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    case_type = _case_type(i)
    fund = FUNDS[i % len(FUNDS)]
    amount = Decimal(rng.randint(500, 500_000)) / 100
    token = str(uuid.UUID(int=rng.getrandbits(128)))
    request = {"donor_ref": f"D-{i}", "fund": fund, "amount": str(amount), "currency": "USD"}
    claim = {
        "pk": pk,
        "status": "PENDING" if case_type == "STUCK_PENDING" else "FAILED",
        "version": 1,
        "attempt_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "payload_hash": f"{rng.getrandbits(256):064x}",
        "request_token": token,
        "token_issued_at": opened_at,
        "created_at": opened_at,
        "claimed_at": opened_at,
        "expires_at": int(opened.timestamp()) + 60,
        "purge_at": int(opened.timestamp()) + 8 * 86400,
        "tenant": "acme",
        "idempotency_key": key,
        "intent_id": f"acme#{key}",
        "request": json.dumps(request),
    }
    case_id = case_id_for(pk, 1, case_type)
    decoded: tuple[DecodedReason, ...] = ()
    if case_type == "CANCELLED_TRANSACTION":
        row = {
            "index": 0,
            "operation": "Put",
            "table": "pledges",
            "key": {"intent_id": f"acme#{key}"},
            "code": "ConditionalCheckFailed",
            "message": "The conditional request failed",
            "old_item": {"intent_id": f"acme#{key}", "amount": str(amount), "fund": fund},
            "attempted": {"intent_id": f"acme#{key}", "amount": "99.00", "fund": fund},
            "explanation": "The pledge for this intent already exists.",
            "branch": "duplicate",
        }
        decoded = (DecodedReason.from_json(row),)
    case = Case(
        case_id=case_id,
        case_type=case_type,
        state="OPEN",
        version=1,
        opened_at=opened_at,
        claim_pk=pk,
        claim_version=1,
        intent_id=f"acme#{key}",
        tenant="acme",
        fund=fund,
        amount=amount,
        currency="USD",
        request_token=token,
        token_issued_at=opened_at,
        audit_seq=1,
        audit_head=GENESIS_HASH,
        queue=case_type,
        queue_sort=f"{opened_at}#{case_id}",
        decoded=decoded,
        evidence=Evidence(claim={"status": claim["status"], "version": 1}, token_window_s=600),
        client_outcome=ClientOutcome(error=ErrorKind.WORKER_DIED),
        last_actor="system",
        last_action_at=opened_at,
        request=CaseRequest.from_json(request),
        in_totals=True,
        donor_ref=request["donor_ref"],
    )
    return to_item(claim), case_to_item(case)


def seed(client, tables, size: int) -> float:
    """Write ``size`` claims and ``size`` open cases plus the per-queue counters."""
    from reconciliation.cases.counters import counter_key
    from reconciliation.cases.vocabulary import QUEUES
    from reconciliation.dynamo.items import to_item

    now = datetime.now(UTC)
    started = time.perf_counter()

    def write(table: str, items: list[dict]) -> None:
        request = {table: [{"PutRequest": {"Item": item}} for item in items]}
        delay = 0.05
        while request:
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems")
            if request:
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def batch(lo: int) -> None:
        built = [_items(i, now) for i in range(lo, min(lo + 25, size))]
        write(tables.idempotency_keys, [claim for claim, _ in built])
        write(tables.cases, [case for _, case in built])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(batch, range(0, size, 25)))
    counts = dict.fromkeys(QUEUES, 0)
    totals = dict.fromkeys(QUEUES, Decimal(0))
    for i in range(size):
        counts[_case_type(i)] += 1
        totals[_case_type(i)] += Decimal(random.Random(i).randint(500, 500_000)) / 100
    write(
        tables.cases,
        [
            to_item(
                {
                    "case_id": counter_key(q, 0),
                    "open_count": n,
                    "totalled": n,
                    "amount_USD": totals[q],
                }
            )
            for q, n in counts.items()
        ],
    )
    return time.perf_counter() - started


class _User:
    """A signed-in finance_staff user without a database row (the views read the role
    the role check caches)."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_superuser = False
    email = "bench@example.org"
    # The page's notification badge counts this id's unread notifications (none).
    pk = id = 0

    def __init__(self):
        from reconciliation.actors import Role

        self._pledge_role = Role.FINANCE_STAFF

    def get_username(self) -> str:
        return "bench"


def _request(path: str, htmx: bool):
    from django.test import RequestFactory
    from django_htmx.middleware import HtmxDetails

    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    request = RequestFactory().get(path, **headers)
    request.user = _User()
    request.htmx = HtmxDetails(request)
    request.correlation_id = "bench"
    return request


def measure(tables, rounds: int, warmup: int) -> dict:  # noqa: C901  (one table of timings)
    from django.conf import settings

    from dashboard.staff.views.queues import queue_view
    from reconciliation.cases.counters import counter_keys
    from reconciliation.casework.selectors import QueueFilters, queue_page
    from reconciliation.dynamo.client import dynamodb_client

    client = dynamodb_client()
    trips = RoundTrips(client)
    raw_kwargs = {
        "TableName": tables.cases,
        "IndexName": "open_by_queue",
        "KeyConditionExpression": "#q = :q",
        "ExpressionAttributeNames": {"#q": "queue"},
        "ExpressionAttributeValues": {":q": {"S": MEASURED}},
        "Limit": PAGE,
        "ScanIndexForward": True,
        "ReturnConsumedCapacity": "TOTAL",
    }
    first = queue_page(MEASURED, limit=PAGE, store=first_store())
    assert len(first.rows) == PAGE and first.next_cursor
    more_path = "/queues/stuck/?" + urlencode({"cursor": first.next_cursor})
    raw_units = client.query(**raw_kwargs)["ConsumedCapacity"]["CapacityUnits"]

    def raw() -> None:
        response = client.query(**raw_kwargs)
        assert len(response["Items"]) == PAGE

    # The same counter items the page reads: every shard of every queue.
    count_keys = counter_keys()

    def raw_with_counts() -> None:
        raw()
        client.batch_get_item(
            RequestItems={tables.cases: {"Keys": count_keys, "ConsistentRead": True}}
        )

    def selector() -> None:
        assert len(queue_page(MEASURED, limit=PAGE, store=first_store()).rows) == PAGE

    def view(path: str, htmx: bool) -> None:
        response = queue_view(_request(path, htmx), "stuck")
        assert response.status_code == 200
        assert response.content.count(b'name="case_ids"') == PAGE
        if not htmx:
            assert b'data-currency="USD"' in response.content  # the amount at risk

    by_amount = {**raw_kwargs, "IndexName": "open_by_amount", "ScanIndexForward": False}

    def raw_by_amount() -> None:
        assert len(client.query(**by_amount)["Items"]) == PAGE

    sorted_units = {}
    for sort in ("newest", "amount_desc", "fund"):
        page = queue_page(
            MEASURED, filters=QueueFilters(sort=sort), limit=PAGE, store=first_store()
        )
        assert len(page.rows) == PAGE and page.next_cursor
        following = queue_page(
            MEASURED,
            filters=QueueFilters(sort=sort),
            limit=PAGE,
            cursor=page.next_cursor,
            store=first_store(),
        )
        sorted_units[sort] = (page.read_units, following.read_units)

    variants = {
        "raw Query (boto3)": raw,
        "raw Query + counts BatchGetItem (boto3)": raw_with_counts,
        "queue_page selector": selector,
        "view, htmx table fragment": lambda: view("/queues/stuck/", True),
        "view, full page": lambda: view("/queues/stuck/", False),
        "view, Load more fragment": lambda: view(more_path, True),
        "raw Query by amount (boto3)": raw_by_amount,
        "view, htmx fragment by amount": lambda: view("/queues/stuck/?sort=amount_desc", True),
        "view, full page by amount": lambda: view("/queues/stuck/?sort=amount_desc", False),
        "view, htmx fragment by fund": lambda: view("/queues/stuck/?sort=fund", True),
    }
    calls = {}
    for name, fn in variants.items():
        before = trips.count
        fn()
        calls[name] = trips.count - before
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {
        "medians_ms": {k: median(v) * 1000 for k, v in times.items()},
        "calls": calls,
        "raw_units": raw_units,
        "page_units": first.read_units,
        "page_queries": first.queries,
        "more_units": queue_page(
            MEASURED, limit=PAGE, cursor=first.next_cursor, store=first_store()
        ).read_units,
        "sorted_units": sorted_units,
        "debug": settings.DEBUG,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # The page's notification badge reads Django's own database: a private one.
    folder = tempfile.mkdtemp(prefix="bench-queue-page-")
    os.environ["DATABASE_URL"] = f"sqlite:///{folder}/db.sqlite3"
    engine = start_engine()
    results = {}
    try:
        from django.conf import settings
        from django.core.management import call_command

        from reconciliation.dynamo.client import dynamodb_client, reset_clients, table_names
        from reconciliation.dynamo.tables import ensure_tables

        call_command("migrate", verbosity=0)
        for size in sizes:
            settings.DDB_TABLE_PREFIX = f"bq{size}-"
            reset_clients()
            tables = table_names()
            ensure_tables(dynamodb_client(), tables)
            seconds = seed(dynamodb_client(), tables, size)
            print(f"seeded {size} claims + {size} cases in {seconds:.0f} s", flush=True)
            result = measure(tables, args.rounds, args.warmup)
            result["seed_s"] = seconds
            results[size] = result
            print(json.dumps({size: result}, indent=1, default=str), flush=True)
    finally:
        engine.stop()
        shutil.rmtree(folder, ignore_errors=True)
    report = render(results, args)
    print(report)
    if args.write:
        write_section("queue_page", report)


def render(results: dict, args) -> str:
    sizes = sorted(results)
    names = list(results[sizes[0]]["medians_ms"])
    lines = [
        "## Queue page (`bench/queue_page.py`)",
        "",
        f"DynamoDB Local 3.3.1; per size, that many claims plus that many open cases (70 % "
        f"in Stuck PENDING, the queue measured); a page is {PAGE} rows; {args.rounds} "
        f"interleaved rounds after {args.warmup} warm-up rounds, medians; {machine_line()}, "
        f"load average {results[sizes[0]]['load']:.1f} → {results[sizes[-1]]['load']:.1f} "
        "(a shared machine: ratios move with the load). "
        "Views run in-process via RequestFactory as a signed-in finance_staff user, "
        "without middleware; times are server-side (DynamoDB round trips + Python + "
        "templates). Seeding: BatchWriteItem, 8 threads "
        + ", ".join(f"{s:,} in {results[s]['seed_s']:.0f} s" for s in sizes)
        + ".",
        "",
        "| variant | DynamoDB calls | "
        + " | ".join(f"{s:,}: ms" for s in sizes)
        + " | "
        + " | ".join(f"{s:,}: × raw" for s in sizes)
        + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in sizes * 2) + " |",
    ]
    for name in names:
        raw = [results[s]["medians_ms"]["raw Query (boto3)"] for s in sizes]
        ms = [results[s]["medians_ms"][name] for s in sizes]
        lines.append(
            f"| {name} | {results[sizes[0]]['calls'][name]} | "
            + " | ".join(f"{m:.1f}" for m in ms)
            + " | "
            + " | ".join(f"{m / r:.2f}" for m, r in zip(ms, raw, strict=True))
            + " |"
        )
    units = {s: results[s]["page_units"] for s in sizes}
    spread = (max(units.values()) - min(units.values())) / max(min(units.values()), 1e-9)
    fragment = [
        results[s]["medians_ms"]["view, htmx table fragment"]
        / results[s]["medians_ms"]["raw Query (boto3)"]
        for s in sizes
    ]
    full = [
        results[s]["medians_ms"]["view, full page"]
        / results[s]["medians_ms"]["raw Query + counts BatchGetItem (boto3)"]
        for s in sizes
    ]
    lines += [
        "",
        "| size | read units / page (selector) | raw Query | Load more page | Queries / page |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in sizes:
        r = results[s]
        lines.append(
            f"| {s:,} | {r['page_units']:g} | {r['raw_units']:g} | {r['more_units']:g} | "
            f"{r['page_queries']} |"
        )
    lines += [
        "",
        "| size | newest first: page 1 / page 2 RCU | largest amount first | by fund |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for s in sizes:
        su = results[s]["sorted_units"]
        lines.append(
            f"| {s:,} | "
            + " | ".join(f"{su[k][0]:g} / {su[k][1]:g}" for k in ("newest", "amount_desc", "fund"))
            + " |"
        )
    # Per order: the largest page (1 or 2) at the largest size against the smallest size.
    # Read units are rounded per 4 KB, so one order's pages may differ by half a unit.
    growth = {
        k: max(results[sizes[-1]]["sorted_units"][k]) / max(results[sizes[0]]["sorted_units"][k])
        for k in ("newest", "amount_desc", "fund")
    }
    by_amount = [
        results[s]["medians_ms"]["view, htmx fragment by amount"]
        / results[s]["medians_ms"]["raw Query by amount (boto3)"]
        for s in sizes
    ]
    lines += [
        "",
        "| target | met | measured |",
        "| --- | --- | --- |",
        f"| read units per page equal within 10 % at {sizes[0]:,} and {sizes[-1]:,} | "
        f"{'yes' if spread <= 0.10 else 'NO'} | "
        + " vs ".join(f"{units[s]:g}" for s in sizes)
        + f" ({spread:.0%} apart) |",
        "| htmx table fragment ≤ 2× the raw Query | "
        f"{'yes' if max(fragment) <= 2 else 'NO'} | "
        + ", ".join(f"{f:.2f}×" for f in fragment)
        + " |",
        "| full page ≤ 2× the raw calls it issues (Query + counts) | "
        f"{'yes' if max(full) <= 2 else 'NO'} | " + ", ".join(f"{f:.2f}×" for f in full) + " |",
        "| read units per page do not grow with the queue in any order (largest page at "
        f"{sizes[-1]:,} ≤ 1.1 × at {sizes[0]:,}) | "
        f"{'yes' if max(growth.values()) <= 1.1 else 'NO'} | "
        + ", ".join(f"{k} {g:.2f}×" for k, g in growth.items())
        + " |",
        "| htmx fragment sorted by amount ≤ 2× its raw Query | "
        f"{'yes' if max(by_amount) <= 2 else 'NO'} | "
        + ", ".join(f"{f:.2f}×" for f in by_amount)
        + " |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
