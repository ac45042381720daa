"""The traffic simulator fills every queue and leaves the ledger equal to the pledges."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from reconciliation.repositories.cases import CASE_TYPES
from reconciliation.services.simulate import SimulationConfig, simulate_run

pytestmark = pytest.mark.django_db(databases=[])


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
