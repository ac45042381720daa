"""No donor data in telemetry: logs and metrics of a full simulate run never carry a
donor reference, a token or reason text."""

from __future__ import annotations

import logging

import pytest

from reconciliation import metrics
from reconciliation.claims.models import intent_id_for
from reconciliation.simulation.simulate import TENANT, SimulationConfig, simulate_run
from tests.helpers import repositories

pytestmark = pytest.mark.django_db(databases=[])


class _Everything(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.lines.append(f"{record.name} {text}")


@pytest.mark.dynamodb_local_only
def test_simulate_run_logs_and_metrics_carry_no_donor_data(ddb):
    """Every log record the configured loggers emit during a faulty simulate run, and the
    /metrics text, are free of the run's donor references and request tokens."""
    capture = _Everything()
    root = logging.getLogger()
    root.addHandler(capture)
    try:
        report = simulate_run(
            SimulationConfig(
                pledges=80,
                seed=11,
                late_worker_ratio=0.05,
                faults={
                    "ambiguous_after_commit": 0.1,
                    "ambiguous_no_commit": 0.05,
                    "crash_after_claim": 0.05,
                    "throttle": 0.1,
                    "transaction_conflict": 0.1,
                },
            )
        )
    finally:
        root.removeHandler(capture)
    repos = repositories()
    secrets: set[str] = set()
    for n in range(80):
        key = f"sim-{report.run_id}-{n}"
        claim = repos.claims.get(f"{TENANT}#create_pledge#{key}")
        pledge = repos.pledges.get(intent_id_for(TENANT, key))
        if claim:
            secrets.update({claim.request["donor_ref"], claim.request_token})
        if pledge:
            secrets.add(pledge.donor_ref)
    assert len(secrets) > 80
    assert capture.lines, "the run logged nothing at all; the capture is not working"
    text = "\n".join(capture.lines)
    leaked = sorted(s for s in secrets if s in text)
    assert leaked == []
    exposition, _ = metrics.render()
    assert not [s for s in secrets if s.encode() in exposition]
