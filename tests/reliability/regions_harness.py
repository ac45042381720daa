"""The two-region reliability runs' parts (docs/regions.md): two DynamoDB Local engines as
``us-east-1`` and ``eu-west-1`` with the same tables, traffic that sends each key to both
regions' servers at about the same time, and what is read back from the tables: whole
tables compared across regions, the pledges recorded per intent in each region, the
ledger against the pledges, and the cases a person resolves.

Tests may Scan; no request path does. After replication has converged every region's
table holds every item, so one region's scan sees both regions' keys; each item still
names the region that wrote it (ledger shard ``@<region>``, pledge stream
``PLEDGE#@<region>#…``, case id ``-<region>``).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from reconciliation.audit.chains import chain_check
from reconciliation.cases.models import RESOLVED
from reconciliation.cases.policy import RETRY_COMMIT
from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.dispositions import case_dispose
from reconciliation.claims.models import RECORDED
from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.local import LocalEngine, start_dynamodb_local
from reconciliation.stores import (
    PLEDGE_STREAM,
    Store,
    case_store,
    case_tag,
    pledge_stream_parts,
    stream_tag,
)
from tests.conftest import staff_actor
from tests.reliability.procs import Answer, ApiServer

REGION_NAMES = ("us-east-1", "eu-west-1")
TABLE_KEYS = {
    "idempotency_keys": ("pk",),
    "pledges": ("intent_id",),
    "ledger": ("fund",),
    "cases": ("case_id",),
    "audit_events": ("stream", "seq"),
}


def start_engines(log_dir: Path) -> list[LocalEngine]:
    """One in-memory DynamoDB Local per region."""
    engines: list[LocalEngine] = []
    try:
        for name in REGION_NAMES:
            engines.append(start_dynamodb_local(log_path=log_dir / f"dynamodb-{name}.log"))
    except BaseException:
        for engine in engines:
            engine.stop()
        raise
    return engines


def regions_spec(engines: list[LocalEngine]) -> str:
    """``DDB_REGIONS`` naming each engine as its region, the first region first."""
    return ",".join(
        f"{name}={engine.endpoint_url}" for name, engine in zip(REGION_NAMES, engines, strict=True)
    )


# --- traffic ------------------------------------------------------------------------------


def paired_sends(keys: list[str], requests: int, seed: int) -> list[tuple[str, int]]:
    """``requests`` sends over ``keys`` as (key, server index): each send of a key to one
    region's server is followed in the list by the same key to the other region's, so two
    clients pick them up at about the same time (the race pinning must win)."""
    rng = random.Random(seed)
    pairs = [key for key in keys for _ in range(requests // len(keys) // 2)]
    rng.shuffle(pairs)
    sends: list[tuple[str, int]] = []
    for key in pairs:
        first = rng.randrange(2)
        sends += [(key, first), (key, 1 - first)]
    return sends


@dataclass
class Sent:
    key: str
    region: str
    answer: Answer


@dataclass
class Traffic:
    """What the clients sent and were told, with the run's wall time."""

    sent: list[Sent] = field(default_factory=list)
    elapsed_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sent: Sent) -> None:
        with self._lock:
            self.sent.append(sent)

    def statuses(self) -> Counter:
        return Counter(s.answer.status for s in self.sent)

    def by_region(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter] = defaultdict(Counter)
        for s in self.sent:
            out[s.region][str(s.answer.status)] += 1
        return {region: dict(sorted(c.items())) for region, c in sorted(out.items())}

    def figures(self) -> dict:
        statuses = self.statuses()
        return {
            "requests": len(self.sent),
            "duration_s": round(self.elapsed_s, 1),
            "throughput_rps": round(len(self.sent) / max(self.elapsed_s, 1e-9), 1),
            "status_distribution": {str(k): v for k, v in sorted(statuses.items())},
            "status_by_region": self.by_region(),
            # A 202 without a case id: the case could not be opened either (the claim is
            # left to the sweep, which opens it).
            "answers_202_without_case": sum(
                1 for s in self.sent if s.answer.status == 202 and not s.answer.body.get("case_id")
            ),
        }


def drive(
    servers: list[ApiServer],
    sends: list[tuple[str, int]],
    body_of: dict[str, dict],
    *,
    clients: int,
) -> Traffic:
    """``clients`` threads take the next send in order and POST it to its server."""
    traffic = Traffic()
    cursor = iter(sends)
    lock = threading.Lock()
    barrier = threading.Barrier(clients)
    regions = [s.env["AWS_REGION"] for s in servers]

    def client() -> None:
        apis = [server.client() for server in servers]
        barrier.wait()
        while True:
            with lock:
                send = next(cursor, None)
            if send is None:
                return
            key, index = send
            traffic.add(Sent(key, regions[index], apis[index].post(key, body_of[key])))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    traffic.elapsed_s = time.monotonic() - started
    return traffic


# --- the tables as read back --------------------------------------------------------------


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
        if pledge.get("status") != RECORDED:
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
        if case_tag(case["case_id"]) == store.tag and case["state"] != RESOLVED
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


def streams_by_region(store: Store) -> Counter:
    """How many audit streams name each region (``""``: the first)."""
    seen = {e["stream"] for e in scan(store, store.tables.audit_events)}
    return Counter(stream_tag(s) or "first" for s in seen)


# --- what a person does -------------------------------------------------------------------


def retry_open(cases: Iterable[dict], case_types: set[str]) -> Counter:
    """A person asks RETRY_COMMIT on each open case of ``case_types``, in the region the
    case lives in (the task runs inline, as the autouse ``celery_eager`` fixture makes
    it); returns how each ended."""
    outcomes: Counter = Counter()
    for row in cases:
        if row["case_type"] not in case_types or row["state"] == RESOLVED:
            continue
        store = case_store(row["case_id"])
        result = case_dispose(
            case_id=row["case_id"],
            disposition=RETRY_COMMIT,
            actor=staff_actor(),
            seen_version=None,
            reason_code="TRANSIENT_FAILURE",
            reason_text="The worker died or its answer was lost; retry the commit.",
            store=store,
        )
        case = CaseRepository(store).get(row["case_id"])
        retry = (case.retry if case else None) or {}
        outcomes[retry.get("status", "none") if result.applied else "refused"] += 1
    return outcomes


# --- what the clients were told, and the figures the checks read ----------------------------

# DESIGN.md §4: committed, replayed, may have committed (202), in progress (409), throttled
# past the retry budget or DynamoDB not reached, nothing recorded (503, with Retry-After:
# an overloaded engine answers too late); 0 is no answer at all: the worker died under the request
# (``crash_after_claim`` in a server aborts it, and the requests it was serving with it).
OUTCOMES = {
    201: {""},
    200: {""},
    202: {"outcome_unknown"},
    409: {"request_in_progress"},
    503: {"throttled", "dynamodb_unavailable"},
    0: {""},
}


def check_answers(traffic: Traffic, *, unpinned: bool = False) -> None:
    """Every answer is one of DESIGN.md §4's outcomes; a 201 is the one created body of
    its key, and a replay repeats it. Unpinned, each region may create a key once."""
    created: dict[tuple[str, str], dict] = {}
    for sent in traffic.sent:
        answer = sent.answer
        error = str(answer.body.get("error", "")) if answer.status not in (200, 201) else ""
        assert error in OUTCOMES.get(answer.status, set()), (sent.key, answer.status, answer.body)
        if answer.status == 201:
            where = (sent.key, sent.region if unpinned else "")
            assert where not in created, f"{sent.key}: a second 201"
            created[where] = answer.body
    for sent in traffic.sent:
        if sent.answer.status == 200:
            assert sent.answer.headers.get("idempotent-replayed") == "true", sent.answer.headers
            bodies = [b for (k, _), b in created.items() if k == sent.key]
            assert not bodies or sent.answer.body in bodies, (sent.key, sent.answer.body)


def check_fund_totals(stores: list[Store], ledger: dict[str, dict]) -> None:
    """``fund_total`` (each region's own shards, read in that region) agrees with the
    scanned ledger of every fund and currency."""
    from reconciliation.claims.ledger import fund_total

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
        if pledge.get("status") == RECORDED:
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
