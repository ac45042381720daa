"""Synthetic donor traffic through the service layer, with fault injection, so every queue
of the dashboard fills with realistic cases (``manage.py simulate``). Fictional records
only: tenant ``sim``, donor references ``SYN-…``.

What it produces, per intent: a first submission; sometimes a double click (the same
request twice at once); sometimes a conflicting retry (same key, changed amount);
client retries after 409/503; a GET after a 202; and, for a few intents, a worker that
stalls past its lease while the client's retry commits (the late worker is fenced by the
durable pledge key; for every other one, a copied request has meanwhile used its token,
so DynamoDB answers a token mismatch). Faults come from the same fault hooks as everywhere
else, on the simulator's own clients (:mod:`reconciliation.simulation.fault_stores`): the run's
plan reaches its own intents' calls and nothing else of the process. At the end the sweep
runs, so crashed claims become STUCK_PENDING cases, and the ledger is checked against the
pledges.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.cases.vocabulary import CASE_TYPES
from reconciliation.casework.search import cases_for_intent
from reconciliation.casework.sweeps import sweep_claims_and_cases
from reconciliation.claims import intake
from reconciliation.claims.ledger import fund_total
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    Claim,
    ClaimBody,
    ClaimKey,
    claim_pk,
    intent_id_for,
    pledge_home,
)
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.claims.request import parse_fields
from reconciliation.dynamo import capacity
from reconciliation.dynamo.capacity import Capacity
from reconciliation.dynamo.items import values
from reconciliation.simulation import faults
from reconciliation.simulation.capacity_budget import Budget
from reconciliation.simulation.fault_stores import FaultStores
from reconciliation.stores import Store, every_store, home_store

TENANT = "sim"
HOT_FUND = "GENERAL"
OTHER_FUNDS = ("BUILDING", "SCHOLARSHIP", "RELIEF")
CURRENCIES = (("USD", 0.6), ("EUR", 0.25), ("GBP", 0.15))


@dataclass
class SimulationConfig:
    pledges: int
    faults: dict[str, float]
    seed: int | None = None
    threads: int = 8
    double_click_ratio: float = 0.10
    conflicting_retry_ratio: float = 0.03
    late_worker_ratio: float = 0.01
    hot_fund_share: float = 0.5
    peak_rps: float = 50.0
    lease_s: int = 2
    client_retries: int = 3
    # New intents a second at most (``None``: as fast as the threads go): intent n starts
    # no earlier than n / rate seconds into the run, a steady load (bench/acks.py).
    rate_per_s: float | None = None


@dataclass
class SimulationReport:
    run_id: str
    outcomes: Counter[str] = field(default_factory=Counter)
    cases_by_type: Counter[str] = field(default_factory=Counter)
    committed_keys: set[str] = field(default_factory=set)
    capacity: dict[str, Capacity] = field(default_factory=dict)
    faults_fired: dict[str, int] = field(default_factory=dict)
    ledger_ok: bool = False
    ledger_lines: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    requests: int = 0
    duplicate_requests: int = 0

    @property
    def duplicate_ratio(self) -> float:
        return self.duplicate_requests / max(1, self.requests - self.duplicate_requests)

    def per(self, outcome: str) -> CapacityShare:
        """Consumed capacity per submission answered ``outcome``: for ``created``, per
        committed pledge (both of its calls, and any retries, together)."""
        return CapacityShare.of(self.capacity.get(outcome, Capacity()), self.outcomes[outcome])

    def per_call(self, outcome: str) -> CapacityShare:
        """Consumed capacity per DynamoDB call made by the submissions answered ``outcome``."""
        cap = self.capacity.get(outcome, Capacity())
        return CapacityShare.of(cap, cap.requests)

    def total(self) -> Capacity:
        """What every measured submission of the run consumed, whatever its outcome."""
        out = Capacity()
        for cap in self.capacity.values():
            out.add(cap)
        return out


@dataclass(frozen=True)
class CapacityShare:
    """Consumed capacity divided by ``over`` (submissions or calls, as the caller says)."""

    write: float
    read: float
    over: int
    index_write: float = 0.0
    failed_write: float = 0.0

    @classmethod
    def of(cls, cap: Capacity, over: int) -> CapacityShare:
        n = max(1, over)
        return cls(cap.write / n, cap.read / n, over, cap.index_write / n, cap.failed_write / n)


# --- one synthetic intent -------------------------------------------------------------------


class _Traffic:
    def __init__(self, config: SimulationConfig, report: SimulationReport):
        self.config = config
        self.report = report
        self.lock = threading.Lock()
        self.stale_workers = 0  # late workers that kept a stale claim, in the order they woke
        self.run = report.run_id
        self.actor = Actor(username=f"api:{TENANT}", role=Role.API, address="simulator")
        # The run's own clients: its faults reach its intents' calls and no others.
        self.stores = FaultStores()
        self.started = time.monotonic()

    def store(self, key: str) -> Store:
        return self.stores.home(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))

    def body(self, rng: random.Random) -> dict[str, Any]:
        fund = HOT_FUND if rng.random() < self.config.hot_fund_share else rng.choice(OTHER_FUNDS)
        currency = rng.choices([c for c, _ in CURRENCIES], [w for _, w in CURRENCIES])[0]
        amount = Decimal(rng.randint(500, 50000)) / 100
        return {
            "donor_ref": f"SYN-{rng.randint(10**6, 10**7 - 1)}",
            "fund": fund,
            "amount": f"{amount:.2f}",
            "currency": currency,
        }

    def submit(self, key: str, body: dict[str, Any], *, duplicate: bool = False) -> str:
        request = parse_fields(body)
        with capacity.measuring() as spent:
            try:
                kind: str = intake.pledge_submit(
                    tenant=TENANT,
                    idempotency_key=key,
                    request=request,
                    actor=self.actor,
                    terms=intake.ClaimTerms(lease_s=self.config.lease_s),
                    store=self.store(key),
                ).kind
            except faults.SimulatedCrash:
                kind = "worker_crashed"
        with self.lock:
            self.report.requests += 1
            self.report.duplicate_requests += int(duplicate)
            self.report.outcomes[kind] += 1
            self.report.capacity.setdefault(kind, Capacity()).add(spent)
        return kind

    def intent(self, n: int) -> None:
        if self.config.rate_per_s:
            time.sleep(max(0.0, self.started + n / self.config.rate_per_s - time.monotonic()))
        rng = random.Random(f"{self.config.seed}-{n}" if self.config.seed is not None else None)
        key = f"sim-{self.run}-{n}"
        body = self.body(rng)
        if rng.random() < self.config.late_worker_ratio:
            self.late_worker(key, body)
            return
        if rng.random() < self.config.double_click_ratio:
            second = threading.Thread(
                target=self.submit, args=(key, body), kwargs={"duplicate": True}
            )
            second.start()
            kind = self.submit(key, body)
            second.join()
        else:
            kind = self.submit(key, body)
        for _ in range(self.config.client_retries):
            if kind not in (
                OutcomeKind.THROTTLED,
                OutcomeKind.CONFLICT,
                OutcomeKind.UNAVAILABLE,
                OutcomeKind.CANCELLED,
            ):
                break
            time.sleep(0.05)
            kind = self.submit(key, body, duplicate=True)
        if kind == OutcomeKind.OUTCOME_UNKNOWN:
            found = intake.pledge_get(pledge_home(TENANT, key), tenant=TENANT, idempotency_key=key)
            with self.lock:
                self.report.outcomes["recovered_by_get" if found else "get_not_found"] += 1
        if rng.random() < self.config.conflicting_retry_ratio:
            changed = dict(body, amount=f"{Decimal(body['amount']) + 1:.2f}")
            self.submit(key, changed, duplicate=True)

    def late_worker(self, key: str, body: dict[str, Any]) -> None:
        """Worker A claims and stalls past its lease; the client's retry re-claims and
        commits; A then tries to commit with its stale claim and must be fenced off."""
        request = parse_fields(body)
        store = self.store(key)
        claim = ClaimRepository(store).new_claim(
            key=ClaimKey.of_pledge(TENANT, key),
            body=ClaimBody(request.payload_hash, request.normalised()),
            correlation_id=str(uuid.uuid4()),
            client_address="simulator",
            lease_s=self.config.lease_s,
        )
        stale: Claim | None = claim
        try:
            ClaimRepository(store).create(claim)
        except Exception:  # noqa: BLE001 - a fault fired; the intent is simply retried below
            stale = None
        time.sleep(self.config.lease_s + 0.3)
        for _ in range(self.config.client_retries + 1):
            kind = self.submit(key, body, duplicate=stale is not None)
            if kind != OutcomeKind.IN_PROGRESS and kind not in (
                OutcomeKind.THROTTLED,
                OutcomeKind.CONFLICT,
            ):
                break
            time.sleep(0.2)
        if stale is not None:
            # Every other late worker finds its token spent by another transaction (a
            # TOKEN_MISMATCH case), the first one included, so a run with any late worker
            # has one. (A coin from the random attempt id left a run with four late
            # workers without one about one time in sixteen, whatever the seed.)
            with self.lock:
                self.stale_workers += 1
                collide = self.stale_workers % 2 == 1
            if collide:
                _token_collision(store, stale, key)
            late = intake.pledge_commit(store, stale)
            with self.lock:
                self.report.outcomes[f"late_worker_{late.kind}"] += 1


def _token_collision(store: Store, stale: Claim, key: str) -> None:
    """Another transaction under the stale worker's token (a copied request replayed by
    hand): a harmless counter in the claims table, expiring like any claim."""
    with contextlib.suppress(Exception):
        store.client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": store.tables.idempotency_keys,
                        "Key": {"pk": {"S": f"{TENANT}#token_collision#{key}"}},
                        "UpdateExpression": "ADD collisions :one SET purge_at = :purge",
                        "ExpressionAttributeValues": values(
                            one=1, purge=clock.epoch() + settings.CLAIM_PURGE_AFTER_S
                        ),
                    }
                }
            ],
            ClientRequestToken=stale.request_token,
        )


def simulate_run(
    config: SimulationConfig, progress: Callable[[int], None] | None = None
) -> SimulationReport:
    """Run the traffic, sweep, and check the ledger; faults apply to the run's own calls
    only (its own clients), never to other traffic of the process.

    The run's claims hold ``config.lease_s`` and its sweep uses no grace, both passed
    down, so crashed claims are found at the end of the run while every other request
    in the process keeps the configured lease (settings are never assigned)."""
    report = SimulationReport(run_id=uuid.uuid4().hex[:8])
    traffic = _Traffic(config, report)
    plan = faults.FaultPlan(config.faults, rng=random.Random(config.seed))
    started = time.monotonic()
    before = _ledger_snapshot()
    with capacity.instrumented(store.client for store in traffic.stores.every()):
        with (
            traffic.stores.injected(plan),
            ThreadPoolExecutor(max_workers=config.threads) as pool,
        ):
            for _ in pool.map(traffic.intent, range(config.pledges)):
                if progress:
                    progress(1)
        # expires_at is whole epoch seconds and the index query asks for expires_at <
        # now: a full second past the lease is the least that finds the last claim.
        time.sleep(config.lease_s + 1.0)
        # The run checks its ledger itself; the drift check's reads are no pledge's capacity.
        # The sweep's cases (crashed claims) are part of what the intents cost.
        with capacity.measuring() as spent:
            sweep_claims_and_cases(every_store(), home=home_store, grace_s=0)
        report.capacity.setdefault("sweep", Capacity()).add(spent)
    report.elapsed_s = time.monotonic() - started
    report.faults_fired = dict(plan.counts)
    _count_cases(report, config.pledges)
    _check_ledger(report, config.pledges, before)
    return report


def _ledger_snapshot() -> dict[tuple[str, str], tuple[Decimal, int]]:
    stores = every_store()
    out = {}
    for fund in (HOT_FUND, *OTHER_FUNDS):
        for currency, _ in CURRENCIES:
            total = fund_total(stores, fund, currency)
            out[(fund, currency)] = (total.pledged_total, total.pledge_count)
    return out


def _count_cases(report: SimulationReport, pledges: int) -> None:
    seen: set[str] = set()
    for n in range(pledges):
        key = f"sim-{report.run_id}-{n}"
        store = home_store(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))
        for case in cases_for_intent(intent_id_for(TENANT, key), store=store):
            if case.case_id not in seen:
                seen.add(case.case_id)
                report.cases_by_type[case.case_type] += 1


def _check_ledger(
    report: SimulationReport, pledges: int, before: dict[tuple[str, str], tuple[Decimal, int]]
) -> None:
    """The ledger moved by exactly the pledges this run recorded, per fund and currency,
    whatever the faults (the durable records are read back, not the answers counted)."""
    recorded: dict[tuple[str, str], tuple[Decimal, int]] = {}
    for n in range(pledges):
        key = f"sim-{report.run_id}-{n}"
        store = home_store(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))
        pledge = PledgeRepository(store).get(intent_id_for(TENANT, key))
        if pledge is None:
            continue
        report.committed_keys.add(key)
        amount, count = recorded.get((pledge.fund, pledge.currency), (Decimal(0), 0))
        recorded[(pledge.fund, pledge.currency)] = (amount + pledge.amount, count + 1)
    after = _ledger_snapshot()
    report.ledger_ok = True
    for fund_currency in sorted(after):
        delta = (
            after[fund_currency][0] - before[fund_currency][0],
            after[fund_currency][1] - before[fund_currency][1],
        )
        expected = recorded.get(fund_currency, (Decimal(0), 0))
        if delta == (Decimal(0), 0) and expected == (Decimal(0), 0):
            continue
        ok = delta[0] == expected[0] and delta[1] == expected[1]
        report.ledger_ok = report.ledger_ok and ok
        report.ledger_lines.append(
            f"{fund_currency[0]} {fund_currency[1]}: ledger moved {delta[0]} ({delta[1]}), "
            f"recorded pledges {expected[0]} ({expected[1]}) {'ok' if ok else 'MISMATCH'}"
        )


def summary_lines(report: SimulationReport, config: SimulationConfig) -> list[str]:
    committed = report.per(OutcomeKind.CREATED)
    committed_call = report.per_call(OutcomeKind.CREATED)
    replay = report.per(OutcomeKind.REPLAYED)
    total = report.total()
    recorded = len(report.committed_keys)
    lines = [
        f"run {report.run_id}: {config.pledges} intents, {report.requests} requests in "
        f"{report.elapsed_s:.1f}s ({report.requests / max(report.elapsed_s, 1e-9):.0f} req/s)",
        f"committed: {report.outcomes[OutcomeKind.CREATED]}, replayed: "
        f"{report.outcomes[OutcomeKind.REPLAYED]}, recovered by GET after 202: "
        f"{report.outcomes['recovered_by_get']}",
        "outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(report.outcomes.items())),
        "faults fired: "
        + (", ".join(f"{k}={v}" for k, v in sorted(report.faults_fired.items())) or "none"),
        "cases by type: " + ", ".join(f"{t}={report.cases_by_type.get(t, 0)}" for t in CASE_TYPES),
        *report.ledger_lines,
        f"ledger check: {'ok' if report.ledger_ok else 'MISMATCH'}",
        "capacity (engine-reported ReturnConsumedCapacity, base table and indexes; DynamoDB "
        "Local counts index writes, at 2× in a transaction, as DynamoDB does):",
        f"  per committed pledge: {committed.write:.2f} WCU ({committed.index_write:.2f} of "
        f"them index writes), {committed.read:.2f} RCU over {committed.over} pledges "
        "committed with a 201 (every call of each)",
        f"    per DynamoDB call: {committed_call.write:.2f} WCU, {committed_call.read:.2f} RCU "
        f"over the {committed_call.over} calls of those submissions",
        f"  per replay: {replay.write:.2f} WCU engine-reported + {replay.failed_write:.2f} WCU "
        f"billed for its failed conditional write, {replay.read:.2f} RCU over {replay.over} "
        "replays",
        f"  whole run: {total.write:.1f} WCU ({total.index_write:.1f} index), {total.read:.1f} "
        f"RCU over {report.requests} submissions and the sweep ({total.requests} calls; "
        f"duplicates, retries and faults included) = {total.write / max(1, recorded):.2f} WCU "
        f"per pledge recorded ({recorded})",
        f"  failed conditional writes: {total.failed_conditions}, billed "
        f"{total.failed_write} WCU by the documented rule (engines report no capacity for "
        "them): " + (", ".join(f"{k}={n}" for k, n in sorted(total.failed.items())) or "none"),
    ]
    budget = Budget(
        peak_rps=config.peak_rps,
        duplicate_ratio=report.duplicate_ratio,
        intents=config.pledges,
        spent=total,
        pledge_base=committed.write - committed.index_write,
    )
    return lines + budget.lines()
