"""Two regions under load (docs/regions.md): two DynamoDB Local engines as
``us-east-1`` and ``eu-west-1``, the Global Tables stand-in between them
(``manage.py replicate_regions``, lag drawn per change between 0.2 and 2 s), and one
production server (gunicorn) per region with injected ambiguity, crashes and throttling.
64 clients send every key to both regions' servers at about the same time.

Pinned (the default): after the sweep, a person's retries and convergence, both regions
hold identical tables, each intent is recorded once, the ledger equals the RECORDED
pledges, the drift check finds nothing, and the dashboard served from either region
lists every open case of both and acts on one that lives in the other region.

Unpinned (``DDB_UNPINNED=1``, the routing the seed warns about): the same race records
some intent in both regions (the ledger exceeds the pledges), and the drift check
(``manage.py sweep``) opens a LEDGER_DRIFT case naming it and counts
``dynamo_cross_region_duplicate_detected_total``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseType
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, intent_id_for
from reconciliation.dynamo.client import TableNames, dynamodb_client, regions, reset_clients
from reconciliation.dynamo.local import LocalEngineError, free_port
from reconciliation.dynamo.tables import ensure_tables
from reconciliation.simulation import faults
from reconciliation.simulation.replicator import ReplicationTimeout, wait_converged
from reconciliation.stores import case_tag, every_store, home_store
from tests.conftest import local_engine_unavailable
from tests.helpers import sign_in
from tests.processes import ROOT
from tests.reliability import regions_harness as h
from tests.reliability import regions_tables as t
from tests.reliability.procs import ApiServer, ReplicatorProcess, django_env, regional_env
from tests.reliability.regions_dashboard import act_from_each_region, listed_from
from tests.reliability.workload import body_for

pytestmark = [pytest.mark.reliability, pytest.mark.dynamodb_local_only]

CLIENTS = 64
KEYS = 200
LAG_MS = "200-2000"
FAULTS = "ambiguous_after_commit=0.04,ambiguous_no_commit=0.04,crash_after_claim=0.03,throttle=0.02"
LEASE_S = 8  # CLAIM_PENDING_TTL_S: the sweep may act once it and the grace have passed
GRACE_S = 1


@pytest.fixture
def regions_pair(settings, log_dir: Path) -> Iterator[TableNames]:
    """Two engines, fresh tables with streams in both, ``settings.DDB_REGIONS`` naming them."""
    try:
        engines = h.start_engines(log_dir)
    except LocalEngineError as exc:
        local_engine_unavailable(exc)
    names = TableNames.from_prefix(f"g{free_port()}-")
    settings.DDB_TABLE_PREFIX = names.idempotency_keys.removesuffix("idempotency_keys")
    settings.DYNAMODB_ENDPOINT_URL = None
    settings.FAULT_INJECTION = ""
    settings.DDB_REGIONS = h.regions_spec(engines)
    settings.DDB_PRIMARY_REGION = h.REGION_NAMES[0]
    faults.set_plan(None)
    reset_clients()
    for region in regions():
        ensure_tables(dynamodb_client(region), names)
    try:
        yield names
    finally:
        for engine in engines:
            engine.stop()
        reset_clients()


class Run:
    """One run's processes: the replicator and a server per region, sharing one Django
    database (one API token works in both regions)."""

    def __init__(self, settings, tmp: Path, log_dir: Path, *, unpinned: bool):
        self.log_dir = log_dir
        self.metrics_dir = tmp / "sweep-metrics"
        self.env = django_env(
            tmp,
            endpoint_url="",
            table_prefix=settings.DDB_TABLE_PREFIX,
            redis_url=f"redis://127.0.0.1:{free_port()}/0",  # intake needs no Redis
            DDB_REGIONS=settings.DDB_REGIONS,
            DDB_PRIMARY_REGION=settings.DDB_PRIMARY_REGION,
            ALLOW_FAULT_INJECTION="1",
            DDB_UNPINNED="1" if unpinned else "0",
            CLAIM_PENDING_TTL_S=str(LEASE_S),
            STUCK_GRACE_S=str(GRACE_S),
            LEDGER_DRIFT_INTERVAL_S="0",
            LEDGER_DRIFT_CONFIRM_MS="500",
        )
        self.replicator = ReplicatorProcess(self.env, log_dir, lag_ms=LAG_MS)
        self.servers = [
            ApiServer(regional_env(self.env, name, FAULT_INJECTION=FAULTS), log_dir)
            for name in h.REGION_NAMES
        ]

    def start(self) -> None:
        self.replicator.start()
        token = self.servers[0].prepare("regions")
        for server in self.servers:
            server.token = token
            server.start()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.replicator.stop()

    def sweep(self) -> tuple[str, float]:
        """``manage.py sweep`` (pinned, no faults) in the first region; returns its output
        and how many cross-region duplicates its drift check counted."""
        for old in self.metrics_dir.glob("*.db"):
            old.unlink()
        self.metrics_dir.mkdir(exist_ok=True)
        env = regional_env(
            self.env,
            h.REGION_NAMES[0],
            FAULT_INJECTION="",
            DDB_UNPINNED="0",
            PROMETHEUS_MULTIPROC_DIR=str(self.metrics_dir),
        )
        done = subprocess.run(
            [sys.executable, "manage.py", "sweep"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        out = done.stdout
        (self.log_dir / f"sweep-{time.monotonic():.0f}.log").write_text(out + done.stderr)
        assert done.returncode == 0, f"manage.py sweep: {out[-3000:]}"
        return out, t.metric_total(self.metrics_dir, "dynamo_cross_region_duplicate_detected_total")


def traffic(run: Run, requests: int, seed: int) -> h.Traffic:
    keys = [f"reg-{i:03d}" for i in range(KEYS)]
    bodies = {key: body_for(i) for i, key in enumerate(keys)}
    return h.drive(run.servers, h.paired_sends(keys, requests, seed), bodies, clients=CLIENTS)


def converge(names: TableNames, since: float) -> dict[str, float]:
    """Wait until both regions hold identical tables, twice, a maximum lag apart (a change
    still on its way would show in the second look). Returns the seconds from ``since``
    (the last write of what is waited for) and the seconds this call waited; on a timeout
    the assertion names the items that differ."""
    started = time.monotonic()
    try:
        wait_converged(regions(), names, timeout=120, every=0.5)
        reached = time.monotonic()
        time.sleep(2.5)
        wait_converged(regions(), names, timeout=60, every=0.5)
    except ReplicationTimeout as exc:
        raise AssertionError(f"{exc}: {t.differences(every_store())}") from None
    return {
        "since_last_write_s": round(reached - since, 1),
        "waited_s": round(reached - started, 1),
    }


def owner_tag(key: str) -> str:
    return home_store(claim_pk("regions", OPERATION_CREATE_PLEDGE, key)).tag


@pytest.mark.django_db
@pytest.mark.timeout(600)
def test_pinned_two_regions_under_load(regions_pair, settings, tmp_path, log_dir, record, client):
    run = Run(settings, tmp_path, log_dir, unpinned=False)
    run.start()
    try:
        sent = traffic(run, 2000, seed=15)  # five pairs a key
        # Whatever the random faults left open, a worker dies under two keys homed in
        # each region, so both regions have cases for the dashboard to list and act on.
        crashed = h.crash_in_each_region("regions", 2)
        time.sleep(LEASE_S + GRACE_S + 1)
        swept, _ = run.sweep()
        stores = every_store()
        open_before = t.open_cases(stores)
        tags = {s.tag for s in stores}
        assert {case_tag(c["case_id"]) for c in open_before} == tags, open_before
        sign_in(client)
        listed = {s.region_name: listed_from(client, s.region_name) for s in stores}
        acted = act_from_each_region(client, open_before)
        retried = h.retry_open(
            t.open_cases(stores), {CaseType.STUCK_PENDING, CaseType.AMBIGUOUS_TIMEOUT}
        )
        final_sweep, duplicates_counted = run.sweep()
        # The last writes were the final sweep's: convergence is timed from there.
        convergence = converge(regions_pair, time.monotonic())
    finally:
        run.stop()
    figures = sent.figures()
    figures.update(
        clients=CLIENTS,
        keys=KEYS,
        faults=FAULTS,
        lag_ms=LAG_MS,
        convergence=convergence,
        replication_latency=run.replicator.latency(),
        replicator=run.replicator.totals(),
        open_cases_after_sweep=len(open_before),
        dashboard_acted=acted,
        retry_commit=dict(retried),
    )
    record("regions_pinned", figures)  # again at the end, with what the checks read
    h.check_answers(sent)
    open_ids = {c["case_id"] for c in open_before if c["case_type"] != CaseType.LEDGER_DRIFT}
    for region, ids in listed.items():
        assert ids == open_ids, (region, sorted(ids ^ open_ids))

    first, second = every_store()
    assert t.differences([first, second]) == []
    # Pinned, every item is written in one region only: the stand-in never meets two
    # regions' writes of one item (a conflict is an item written outside its region).
    assert figures["replicator"]["conflicts_lost"] == 0, figures["replicator"]
    figures["items"] = t.item_counts(first)
    receipts = t.receipts_by_intent(first)
    twice = {i: t for i, t in receipts.items() if len(t) != 1}
    figures["duplicates"] = len(twice)
    assert twice == {}, twice
    for intent, [tag] in receipts.items():
        assert tag == owner_tag(intent.partition("#")[2]), intent
    ledger = t.ledger_against_pledges(first)
    figures["ledger"] = {k: f"{v['ledger']} ({v['ledger_count']})" for k, v in ledger.items()}
    off = {
        k: {n: str(x) for n, x in v.items()}
        for k, v in ledger.items()
        if (v["ledger"], v["ledger_count"]) != (v["pledges"], v["count"])
    }
    if off:
        record("regions_pinned", {**figures, "ledger_off": off, "shards": t.shards_off(first)})
    assert off == {}
    t.check_fund_totals(stores, ledger)
    assert not [c for s in stores for c in t.cases_of(s) if c["case_type"] == CaseType.LEDGER_DRIFT]
    assert duplicates_counted == 0 and "LEDGER" not in final_sweep
    assert t.chains_and_versions(first) == []
    # Every key a client was told about (committed, replayed, or may have committed) is
    # recorded once, in its home region.
    told = {s.key for s in sent.sent if s.answer.status in (200, 201, 202)} | set(crashed)
    figures["recorded"] = len(receipts)
    assert {intent_id_for("regions", k) for k in told} <= set(receipts)
    figures["sweep"] = swept.splitlines()[:3]
    record("regions_pinned", figures)


@pytest.mark.django_db(databases=[])
@pytest.mark.timeout(600)
def test_unpinned_two_regions_record_the_duplicate_and_the_drift_check_catches_it(
    regions_pair, settings, tmp_path, log_dir, record
):
    run = Run(settings, tmp_path, log_dir, unpinned=True)
    run.start()
    try:
        sent = traffic(run, 800, seed=16)  # two pairs a key: the race, twice
        ended = time.monotonic()
        convergence = converge(regions_pair, ended)
        first, second = every_store()
        identical = t.differences([first, second])
        swept, duplicates_counted = run.sweep()
        # Last writer wins per item: even with items written in both regions, every
        # region ends with the same tables once the sweep's writes have replicated.
        after_sweep = converge(regions_pair, time.monotonic())
    finally:
        run.stop()
    figures = sent.figures()
    figures.update(
        clients=CLIENTS,
        keys=KEYS,
        faults=FAULTS,
        lag_ms=LAG_MS,
        unpinned=True,
        convergence=convergence,
        convergence_after_sweep=after_sweep,
        replication_latency=run.replicator.latency(),
        replicator=run.replicator.totals(),
    )
    record("regions_unpinned", figures)  # again at the end, with what the checks read
    h.check_answers(sent, unpinned=True)
    assert identical == []
    receipts = t.receipts_by_intent(first)
    twice = sorted(i for i, tags in receipts.items() if len(tags) > 1)
    figures["duplicates"] = len(twice)
    assert twice, "no intent was recorded in both regions"
    ledger = t.ledger_against_pledges(first)
    over = {k: v["ledger"] - v["pledges"] for k, v in ledger.items() if v["ledger"] > v["pledges"]}
    figures["ledger_over_pledges"] = {k: str(v) for k, v in over.items()}
    assert over, ledger
    drift = [c for c in t.cases_of(first) if c["case_type"] == CaseType.LEDGER_DRIFT]
    figures["ledger_drift_cases"] = len(drift)
    evidence = [CaseRepository(first).get(c["case_id"]).evidence.drift for c in drift]
    named = {i["intent_id"] for facts in evidence for i in facts["intents"]}
    figures["ledger_drift_evidence"] = [
        {k: facts[k] for k in ("scope", "fund", "currency", "difference", "intent_count")}
        for facts in evidence
    ]
    assert drift and named & set(twice), (swept, drift)
    figures["duplicates_counted"] = duplicates_counted
    assert duplicates_counted == len(twice), (duplicates_counted, twice)
    record("regions_unpinned", figures)
