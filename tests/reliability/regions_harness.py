"""The two-region reliability runs' parts (docs/regions.md): two DynamoDB Local engines as
``us-east-1`` and ``eu-west-1`` with the same tables, traffic that sends each key to both
regions' servers at about the same time, the answers checked against docs/design.md §4, crashed
claims left in each region, and a person's retries in the region each case lives in. The
readers of whole tables are in :mod:`tests.reliability.regions_tables`.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, Disposition
from reconciliation.casework.dispositions import case_dispose
from reconciliation.claims import intake
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, pledge_home
from reconciliation.claims.request import parse_fields
from reconciliation.dynamo.local import LocalEngine, start_dynamodb_local
from reconciliation.simulation import faults
from reconciliation.stores import (
    case_store,
    every_store,
    home_store,
)
from tests import fault_helpers
from tests.conftest import staff_actor
from tests.reliability.procs import Answer, ApiServer
from tests.reliability.workload import body_for

REGION_NAMES = ("us-east-1", "eu-west-1")


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
    """``DDB_REGIONS`` naming each engine as its region (the first is made primary by
    ``DDB_PRIMARY_REGION``: the order itself decides nothing)."""
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


# --- what a person does -------------------------------------------------------------------


def retry_open(cases: Iterable[dict], case_types: set[str]) -> Counter:
    """A person asks RETRY_COMMIT on each open case of ``case_types``, in the region the
    case lives in (the task runs inline, as the autouse ``celery_eager`` fixture makes
    it); returns how each ended."""
    outcomes: Counter = Counter()
    for row in cases:
        if row["case_type"] not in case_types or row["state"] == CaseState.RESOLVED:
            continue
        store = case_store(row["case_id"])
        result = case_dispose(
            case_id=row["case_id"],
            disposition=Disposition.RETRY_COMMIT,
            staff=StaffAction(
                actor=staff_actor(),
                reason_code="TRANSIENT_FAILURE",
                reason_text="The worker died or its answer was lost; retry the commit.",
                seen_version=None,
            ),
            store=store,
        )
        case = CaseRepository(store).get(row["case_id"])
        retry = case.retry if case else None
        status = retry.status if retry else "none"
        outcomes[status if result.applied else "refused"] += 1
    return outcomes


# --- what the clients were told, and the figures the checks read ----------------------------

# docs/design.md §4: committed, replayed, may have committed (202), in progress (409), throttled
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
    """Every answer is one of docs/design.md §4's outcomes; a 201 is the one created body of
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
            if unpinned:
                # Either region's pledge may be the one a replay reads (or one whose 201
                # was lost): the same request, recorded at another moment.
                bodies = [{**b, "created_at": sent.answer.body.get("created_at")} for b in bodies]
            assert not bodies or sent.answer.body in bodies, (sent.key, sent.answer.body)


def crash_in_each_region(tenant: str, per_region: int) -> list[str]:
    """Leave ``per_region`` claims PENDING in each region, as a worker that died between
    claim and commit does (a 1-second lease), so the sweep opens a case in each region
    whatever the random faults of the run left: keys ``crashed-<region>-<n>`` homed there."""
    actor = Actor(username=f"api:{tenant}", role=Role.API, address="127.0.0.1")
    keys: list[str] = []
    for store in every_store():
        n = 0
        while sum(k.startswith(f"crashed-{store.region_name}-") for k in keys) < per_region:
            n += 1
            key = f"crashed-{store.region_name}-{n}"
            if home_store(claim_pk(tenant, OPERATION_CREATE_PLEDGE, key)).tag != store.tag:
                continue
            request = parse_fields(body_for(1000 + len(keys)))
            with fault_helpers.injected({"crash_after_claim": 1.0}):
                try:
                    intake.pledge_submit(
                        pledge_home(tenant, key),
                        tenant=tenant,
                        idempotency_key=key,
                        request=request,
                        actor=actor,
                        terms=intake.ClaimTerms(lease_s=1),
                    )
                except faults.SimulatedCrash:
                    keys.append(key)
    return keys
