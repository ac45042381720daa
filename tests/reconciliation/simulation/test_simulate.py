"""The traffic simulator fills every queue and leaves the ledger equal to the pledges."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from reconciliation.cases.vocabulary import CASE_TYPES
from reconciliation.simulation.simulate import SimulationConfig, simulate_run

pytestmark = pytest.mark.django_db(databases=[])


def plain_traffic(pledges: int, **overrides) -> SimulationConfig:
    """No faults, no double clicks, conflicting retries or late workers, unless asked."""
    quiet = dict(
        faults={}, double_click_ratio=0.0, conflicting_retry_ratio=0.0, late_worker_ratio=0.0
    )
    return SimulationConfig(pledges=pledges, **{**quiet, **overrides})


@pytest.mark.dynamodb_local_only
def test_fixed_seed_produces_every_case_type_and_a_balanced_ledger(ddb):
    """150 synthetic intents with faults (fixed seed): at least one case of every type,
    and per fund and currency the ledger moved by exactly the recorded pledges."""
    config = SimulationConfig(
        pledges=150,
        faults={
            "ambiguous_after_commit": 0.05,
            "crash_after_claim": 0.04,
            "throttle": 0.05,
            "transaction_conflict": 0.1,
        },
        seed=7,
        late_worker_ratio=0.03,
    )
    report = simulate_run(config)
    assert {t: report.cases_by_type[t] > 0 for t in CASE_TYPES} == dict.fromkeys(CASE_TYPES, True)
    assert report.ledger_ok, report.ledger_lines
    assert report.ledger_lines
    assert report.outcomes["created"] > 100
    assert report.per("created").write > 0


@pytest.mark.engines("moto")
def test_simulate_command_prints_summary_and_rejects_bad_faults(ddb):
    """The command prints the summary with capacity and budget; bad --faults is refused."""
    out = io.StringIO()
    # One thread: moto's in-process backend is not thread-safe (measured: concurrent
    # writes to one item raise "dictionary changed size during iteration" inside moto).
    call_command(
        "simulate",
        "--pledges",
        "20",
        "--faults",
        "",
        "--seed",
        "1",
        "--threads",
        "1",
        "--peak-rps",
        "100",
        stdout=out,
    )
    text = out.getvalue()
    assert "committed: " in text and "ledger check: ok" in text
    assert "per committed pledge:" in text and "required_WCU" in text
    with pytest.raises(CommandError, match="unknown fault"):
        call_command("simulate", "--pledges", "5", "--faults", "meteor=1")
    with pytest.raises(CommandError, match="argument --peak-rps: .0. is not a number from 0.001"):
        call_command("simulate", "--pledges", "5", "--peak-rps", "0")


def test_simulate_passes_its_lease_down_and_never_assigns_settings(ddb, monkeypatch, settings):
    """A run with short leases (crashed claims for the sweep, late workers re-claimed by
    the client's retry) works while every request and the sweep see the settings as
    configured: the run's lease and grace are passed down, never assigned to settings."""
    from django.conf import settings as live

    from reconciliation.simulation import simulate as simulate_module

    settings.CLAIM_PENDING_TTL_S, settings.STUCK_GRACE_S = 60, 30  # as configured
    seen: list[tuple[str, int, int]] = []
    submit, sweep = simulate_module.intake.pledge_submit, simulate_module.sweep_claims_and_cases

    def observed(name, call):
        def wrapper(*args, **kwargs):
            seen.append((name, live.CLAIM_PENDING_TTL_S, live.STUCK_GRACE_S))
            return call(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(simulate_module.intake, "pledge_submit", observed("submit", submit))
    monkeypatch.setattr(simulate_module, "sweep_claims_and_cases", observed("sweep", sweep))
    quiet = {"double_click_ratio": 0.0, "conflicting_retry_ratio": 0.0, "threads": 1}

    crashed = simulate_run(
        SimulationConfig(
            pledges=3,
            faults={"crash_after_claim": 1.0},
            seed=3,
            lease_s=1,
            late_worker_ratio=0.0,
            **quiet,
        )
    )
    assert crashed.outcomes["worker_crashed"] == 3
    assert crashed.cases_by_type["STUCK_PENDING"] == 3  # the 1 s leases ran out: swept
    assert crashed.ledger_ok, crashed.ledger_lines

    late = simulate_run(
        SimulationConfig(pledges=2, faults={}, seed=4, lease_s=1, late_worker_ratio=1.0, **quiet)
    )
    # The client's retry re-claimed each stalled 1 s lease and committed; each late
    # worker was fenced off.
    assert late.outcomes["created"] == 2 and len(late.committed_keys) == 2
    fenced = {k: v for k, v in late.outcomes.items() if k.startswith("late_worker_")}
    assert sum(fenced.values()) == 2 and "late_worker_created" not in fenced
    assert late.ledger_ok, late.ledger_lines

    assert {name for name, _, _ in seen} == {"submit", "sweep"}
    assert {(ttl, grace) for _, ttl, grace in seen} == {(60, 30)}
    assert (live.CLAIM_PENDING_TTL_S, live.STUCK_GRACE_S) == (60, 30)


@pytest.mark.dynamodb_local_only
def test_capacity_per_committed_pledge_is_per_pledge_not_per_call(ddb, monkeypatch):
    """A no-fault run of 4 pledges, 2 write calls each (claim PutItem, commit
    TransactWriteItems): the figure reported per committed pledge is every write unit
    DynamoDB Local reported for the run divided by the 4 pledges (twice the per-call
    figure), and the summary prints it under that label. Consumed capacity is only
    engine-reported on DynamoDB Local (index writes included)."""
    from reconciliation.simulation import fault_stores
    from reconciliation.simulation.fault_hooks import fault_injecting_client
    from reconciliation.simulation.simulate import summary_lines

    writes = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")
    reported: list[float] = []

    def engine_reported(parsed, model, **_kwargs):
        consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
        if model.name in writes and consumed:
            entries = consumed if isinstance(consumed, list) else [consumed]
            reported.extend(entry["CapacityUnits"] for entry in entries)

    def observed_client(*args, **kwargs):
        client = fault_injecting_client(*args, **kwargs)
        client.meta.events.register("after-call.dynamodb", engine_reported)
        return client

    # The run's calls go through the simulator's own clients; the sweep's reads through
    # the shared one.
    ddb.client.meta.events.register("after-call.dynamodb", engine_reported)
    monkeypatch.setattr(fault_stores, "fault_injecting_client", observed_client)
    try:
        config = plain_traffic(4, seed=5, threads=1)
        report = simulate_run(config)
    finally:
        ddb.client.meta.events.unregister("after-call.dynamodb", engine_reported)

    assert report.outcomes == {"created": 4} and len(report.committed_keys) == 4
    engine_total = sum(reported)
    assert engine_total > 0
    per_pledge = report.per("created")
    assert per_pledge.write == pytest.approx(engine_total / 4)
    per_call = report.per_call("created")
    assert report.capacity["created"].requests == 8
    assert per_pledge.write == pytest.approx(2 * per_call.write)
    text = "\n".join(summary_lines(report, config))
    assert f"per committed pledge: {engine_total / 4:.2f} WCU" in text
    assert f"per DynamoDB call: {engine_total / 8:.2f} WCU" in text


def test_the_measured_budget_adds_base_index_and_failed_writes_per_intent():
    """The measured rule is peak × (base + index + failed conditional write units) per
    intent; the seed rule, a pledge's 9 base units times (1 + duplicate ratio), leaves
    out index and failed writes and falls short by about a third."""
    from collections import Counter

    from reconciliation.dynamo.capacity import Capacity
    from reconciliation.simulation.capacity_budget import Budget

    spent = Capacity(
        write=140.0,
        index_write=50.0,
        failed=Counter({"put:idempotency_keys": 4}),
        failed_units=Counter({"put:idempotency_keys": 4}),
    )
    budget = Budget(peak_rps=100, duplicate_ratio=0.1, intents=10, spent=spent, pledge_base=9)

    assert (budget.base, budget.index, budget.failed) == (9.0, 5.0, 0.4)
    assert budget.measured_wcu == pytest.approx(1440)
    assert budget.seed_wcu == pytest.approx(990)
    text = "\n".join(budget.lines())
    assert "base items: 100 × 9.00 = 900 WCU" in text
    assert "index writes: 100 × 5.00 = 500 WCU" in text
    assert "failed conditional writes: 100 × 0.40 = 40 WCU" in text
    assert "put:idempotency_keys: 0.400 per intent, 4 WCU in the run" in text
    assert "= 100 × 1.10 × 9.00 = 990 WCU" in text
    assert "total: 1440 WCU at peak; the seed rule under-provisions by 31%" in text


@pytest.mark.dynamodb_local_only
def test_double_clicks_show_in_the_budget_as_failed_conditional_writes(ddb):
    """Every double click is a second claim PutItem whose condition fails (or, when it
    arrives first, the first one's): the engine reports nothing for it, the budget counts
    it by kind at the existing claim's size, and the whole run's failed writes reach the
    measured rule."""
    from reconciliation.simulation.simulate import summary_lines

    config = plain_traffic(12, seed=3, threads=2, double_click_ratio=1.0, peak_rps=10)
    report = simulate_run(config)

    total = report.total()
    # One failed claim PutItem per double click (whichever of the two lost), each billed
    # 1 unit (a claim under 1 KB); nothing else failed on a condition.
    assert dict(total.failed) == {"put:idempotency_keys": 12}
    assert dict(total.failed_units) == {"put:idempotency_keys": 12}
    assert report.outcomes["created"] == 12
    # 11 base units a pledge: the claim 1, the commit's four items, 8, and its request log
    # entry 2; 11 index units: 7, and 2 each for its acks_due and by_donor_key entries
    # (docs/capacity.md).
    assert total.base_write == pytest.approx(12 * 11)
    assert total.index_write == pytest.approx(12 * 11)
    text = "\n".join(summary_lines(report, config))
    assert "failed conditional writes: 10 × 1.00 = 10 WCU" in text
    assert "put:idempotency_keys: 1.000 per intent, 12 WCU in the run" in text
    assert "total: 230 WCU at peak" in text  # 10/s × (11 base + 11 index + 1 failed claim)


def test_an_engine_reporting_no_capacity_gets_no_measured_rule():
    from reconciliation.dynamo.capacity import Capacity
    from reconciliation.simulation.capacity_budget import Budget

    budget = Budget(peak_rps=50, duplicate_ratio=0, intents=5, spent=Capacity(), pledge_base=0)
    text = "\n".join(budget.lines())

    assert "no committed pledge with reported consumed capacity" in text
    assert "total:" not in text and "0 WCU" not in text


def test_a_run_that_committed_nothing_gets_no_budget():
    """Capacity was reported (failed claims, cases) but no pledge committed: there is no
    pledge to price the seed rule with, and no "under-provisions by 100%"."""
    from reconciliation.dynamo.capacity import Capacity
    from reconciliation.simulation.capacity_budget import Budget

    spent = Capacity(write=28.0, index_write=12.0)
    text = "\n".join(
        Budget(peak_rps=50, duplicate_ratio=0, intents=5, spent=spent, pledge_base=0).lines()
    )

    assert "no committed pledge" in text and "%" not in text
