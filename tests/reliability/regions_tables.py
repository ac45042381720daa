"""The two-region runs' readers of whole tables (tests may Scan; no request path does):
every item of each region side by side, the receipts per intent, the ledger against the
RECORDED pledges, the cases, the audit chains, and a counter a subprocess wrote to its
``PROMETHEUS_MULTIPROC_DIR``.

After replication has converged every region's table holds every item, so one region's
scan sees both regions' keys; each item still names the region that wrote it (ledger
shard ``@<region>``, pledge stream ``PLEDGE#@<region>#…``, case id ``-<region>``).
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from reconciliation.audit.chains import chain_check
from reconciliation.cases.vocabulary import CaseState
from reconciliation.claims.ledger import fund_total
from reconciliation.claims.models import PledgeStatus
from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.items import from_item
from reconciliation.stores import PLEDGE_STREAM, Store, case_tag, pledge_stream_parts

TABLE_KEYS = {
    "idempotency_keys": ("pk",),
    "pledges": ("intent_id",),
    "ledger": ("fund",),
    "cases": ("case_id",),
    "audit_events": ("stream", "seq"),
}


def scan(store: Store, table: str) -> list[dict]:
    items: list[dict] = []
    kwargs: dict = {"TableName": table, "ConsistentRead": True}
    while True:
        page = store.client.scan(**kwargs)
        items.extend(from_item(i) for i in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def snapshot(store: Store) -> dict[str, dict[tuple, dict]]:
    """Every item of the five tables of one region, by role and primary key."""
    names: TableNames = store.tables
    out: dict[str, dict[tuple, dict]] = {}
    for role, key in TABLE_KEYS.items():
        items = scan(store, getattr(names, role))
        out[role] = {tuple(str(item[k]) for k in key): item for item in items}
    return out


def differences(stores: list[Store], *, limit: int = 20) -> list[str]:
    """Where the regions' tables differ (empty when every item is the same in all)."""
    first, *others = [snapshot(s) for s in stores]
    problems: list[str] = []
    for other, store in zip(others, stores[1:], strict=True):
        for role in TABLE_KEYS:
            mine, theirs = first[role], other[role]
            for key in sorted(set(mine) | set(theirs)):
                if mine.get(key) != theirs.get(key):
                    where = "absent" if key not in theirs else "differs"
                    where = "only there" if key not in mine else where
                    problems.append(f"{role} {'/'.join(key)}: {where} in {store.region_name}")
    return problems[:limit] + ([f"… {len(problems) - limit} more"] if len(problems) > limit else [])


def item_counts(store: Store) -> dict[str, int]:
    return {role: len(items) for role, items in snapshot(store).items()}


def receipts_by_intent(store: Store) -> dict[str, list[str]]:
    """intent id → the region tags of its ``pledge_recorded`` receipts in ``store``'s
    table (after convergence, every region's receipts)."""
    out: dict[str, list[str]] = defaultdict(list)
    for event in scan(store, store.tables.audit_events):
        if event["stream"].startswith(PLEDGE_STREAM) and event.get("action") == "pledge_recorded":
            intent, tag = pledge_stream_parts(event["stream"])
            out[intent].append(tag)
    return dict(out)


def ledger_against_pledges(store: Store) -> dict[str, dict]:
    """Per fund and currency: the ledger summed over every region's shards, and the sum
    of RECORDED pledges (from one converged region's table)."""
    rows: dict[tuple[str, str], dict] = defaultdict(
        lambda: {"ledger": Decimal(0), "ledger_count": 0, "pledges": Decimal(0), "count": 0}
    )
    for item in scan(store, store.tables.ledger):
        if "fund_code" not in item:
            continue
        row = rows[(item["fund_code"], item["currency"])]
        row["ledger"] += Decimal(str(item.get("pledged_total", 0)))
        row["ledger_count"] += int(item.get("pledge_count", 0))
    for pledge in scan(store, store.tables.pledges):
        if pledge.get("status") != PledgeStatus.RECORDED:
            continue
        row = rows[(pledge["fund"], pledge["currency"])]
        row["pledges"] += Decimal(str(pledge["amount"]))
        row["count"] += 1
    return {f"{f}#{c}": row for (f, c), row in sorted(rows.items())}


def cases_of(store: Store) -> list[dict]:
    """Every case in ``store``'s table (its own and, after convergence, replicas)."""
    return [c for c in scan(store, store.tables.cases) if not c["case_id"].startswith("#")]


def open_cases(stores: list[Store]) -> list[dict]:
    """Every open case, each read in the region it lives in."""
    return [
        case
        for store in stores
        for case in cases_of(store)
        if case_tag(case["case_id"]) == store.tag and case["state"] != CaseState.RESOLVED
    ]


def chains_and_versions(store: Store) -> list[str]:
    """Every audit chain in ``store``'s table verifies, and each case's version counts
    its stream's events (from one converged region's table: every region's streams)."""
    streams: dict[str, list[dict]] = defaultdict(list)
    for event in scan(store, store.tables.audit_events):
        streams[event["stream"]].append(event)
    problems = []
    for stream, events in sorted(streams.items()):
        events.sort(key=lambda e: int(e["seq"]))
        status = chain_check(stream, events)
        if not status.ok:
            problems.append(f"chain {status.line()}")
    for case in cases_of(store):
        events = streams.get(f"CASE#{case['case_id']}", [])
        if int(case["version"]) != len(events):
            problems.append(
                f"case {case['case_id']}: version {case['version']}, {len(events)} events"
            )
    return problems


def check_fund_totals(stores: list[Store], ledger: dict[str, dict]) -> None:
    """``fund_total`` (each region's own shards, read in that region) agrees with the
    scanned ledger of every fund and currency."""
    for name, row in ledger.items():
        fund, _, currency = name.partition("#")
        total = fund_total(stores, fund, currency)
        assert (total.pledged_total, total.pledge_count) == (row["ledger"], row["ledger_count"])


def metric_total(directory: Path, name: str) -> float:
    """A counter's value as a process wrote it to ``PROMETHEUS_MULTIPROC_DIR``."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name
    )


def shards_off(store: Store) -> dict[str, str]:
    """Ledger shards whose total differs from the pledges that name them (``ledger_key``
    on each pledge): where a ledger mismatch lives."""
    booked = {i["fund"]: i for i in scan(store, store.tables.ledger) if "fund_code" in i}
    want: dict[str, list] = defaultdict(lambda: [Decimal(0), 0, []])
    for pledge in scan(store, store.tables.pledges):
        if pledge.get("status") == PledgeStatus.RECORDED:
            row = want[pledge["ledger_key"]]
            row[0] += Decimal(str(pledge["amount"]))
            row[1] += 1
            row[2].append(pledge["intent_id"])
    out = {}
    for shard in sorted(set(booked) | set(want)):
        item = booked.get(shard, {})
        have = (Decimal(str(item.get("pledged_total", 0))), int(item.get("pledge_count", 0)))
        amount, count, intents = want.get(shard, (Decimal(0), 0, []))
        if have != (amount, count):
            out[shard] = f"ledger {have[0]} ({have[1]}), pledges {amount} ({count}): {intents}"
    return out
