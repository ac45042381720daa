"""The fault matrix: each fault on DynamoDB Local, then the sweep, then the
invariants of :mod:`tests.reliability.invariants`.

Figures of the last run are in ``test-results/reliability/*.json`` and
``docs/reliability.md``.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from reconciliation.cases.vocabulary import CASE_TYPES, CaseState, CaseType
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.ledger import ledger_key_for
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, intent_id_for
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.simulation.simulate import TENANT, SimulationConfig, simulate_run
from reconciliation.stores import every_store, home_store
from tests.conftest import pledge_body
from tests.helpers import cases, repositories
from tests.reconciliation.factories import stuck_case, submit
from tests.reliability.invariants import assert_invariants
from tests.reliability.workload import retry_open_cases

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.dynamodb_local_only,
    pytest.mark.django_db(databases=[]),
]

PLEDGES = 300


def _intent_fates(run_id: str) -> Counter:
    """How each intent of the run ended, read from the tables: recorded, or why not."""
    repos = repositories()
    fates: Counter = Counter()
    for n in range(PLEDGES):
        key = f"sim-{run_id}-{n}"
        if repos.pledges.get(intent_id_for(TENANT, key)) is not None:
            fates["recorded"] += 1
            continue
        claim = repos.claims.get(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key))
        if claim is None:
            fates["never_claimed (client told 503)"] += 1
        elif claim.case_id:
            fates[f"{claim.status.lower()} with case"] += 1
        else:
            fates[f"{claim.status.lower()} without case"] += 1
    return fates


@pytest.mark.parametrize(
    "fault,probability",
    [
        ("ambiguous_after_commit", 0.2),
        ("throttle", 0.2),
        ("crash_after_claim", 0.1),
    ],
)
def test_fault_run_keeps_every_invariant(ddb, record, fault, probability):
    """300 synthetic intents (double clicks, conflicting retries, late workers) with one
    fault firing at the given rate; after the sweep the ledger equals the recorded
    pledges, nothing is duplicated, every case change has its event, every chain
    verifies, and every intent is recorded or followed by a case."""
    config = SimulationConfig(pledges=PLEDGES, faults={fault: probability}, seed=8)
    started = time.monotonic()
    report = simulate_run(config)
    assert report.ledger_ok, report.ledger_lines
    fired = report.faults_fired.get(fault, 0)
    assert fired > 0, report.faults_fired
    figures = {
        "fault": f"{fault}={probability}",
        "intents": PLEDGES,
        "requests": report.requests,
        "faults_fired": fired,
        "outcomes": dict(report.outcomes),
        "cases_by_type": {t: report.cases_by_type.get(t, 0) for t in CASE_TYPES},
        "simulate_s": round(report.elapsed_s, 1),
    }
    invariants = assert_invariants(ddb)
    fates = _intent_fates(report.run_id)
    figures["intent_fates"] = dict(fates)
    assert not [f for f in fates if "without case" in f], fates

    if fault == "ambiguous_after_commit":
        # Every 202 was a commit whose answer was lost: the re-check resolved every
        # AMBIGUOUS_TIMEOUT case from the durable record, and each client's GET after its
        # 202 found the pledge.
        ambiguous = [c for c in cases(ddb) if c["case_type"] == CaseType.AMBIGUOUS_TIMEOUT]
        assert len(ambiguous) >= report.outcomes[OutcomeKind.OUTCOME_UNKNOWN] > 0
        assert all(c["state"] == CaseState.RESOLVED for c in ambiguous)
        assert report.outcomes["recovered_by_get"] > 0
        assert report.outcomes["get_not_found"] == 0
    elif fault == "throttle":
        # Throttling is retried with the same token, or answered 503 with nothing
        # written: never a 202, never an ambiguous case.
        assert report.outcomes[OutcomeKind.OUTCOME_UNKNOWN] == 0
        assert report.cases_by_type.get(CaseType.AMBIGUOUS_TIMEOUT, 0) == 0
    else:
        # One STUCK_PENDING case per crashed claim; a person's RETRY_COMMIT commits each
        # exactly once, and the invariants still hold afterwards.
        stuck = [c for c in cases(ddb) if c["case_type"] == CaseType.STUCK_PENDING]
        assert len(stuck) == report.outcomes["worker_crashed"] > 0
        retried = retry_open_cases(ddb, CaseType.STUCK_PENDING)
        figures["retry_commit"] = dict(retried)
        assert retried == Counter(created=len(stuck)), retried
        assert sweep_all(every_store(), home=home_store).opened == []
        invariants = assert_invariants(ddb)
        fates = _intent_fates(report.run_id)
        figures["intent_fates_after_retry"] = dict(fates)
        assert not [f for f in fates if f.startswith("pending")], fates
    figures["invariants"] = invariants.figures()
    figures["duration_s"] = round(time.monotonic() - started, 1)
    record(f"fault_{fault}", figures)


def _double_booking(ddb) -> None:
    """A ledger update applied twice, as moto does with a retried token."""
    body = pledge_body(amount=f"{random.randint(100, 999)}.00")
    assert submit("twice", amount=body["amount"]).kind == OutcomeKind.CREATED
    key = ledger_key_for("GENERAL", "USD", intent_id_for("acme", "twice"))
    ddb.client.update_item(
        TableName=ddb.tables.ledger,
        Key={"fund": {"S": key}},
        UpdateExpression="ADD pledged_total :a, pledge_count :c",
        ExpressionAttributeValues={":a": {"N": body["amount"]}, ":c": {"N": "1"}},
    )


def _change_without_event(ddb) -> None:
    """A case written without its audit event."""
    case = stuck_case("silent")
    ddb.client.update_item(
        TableName=ddb.tables.cases,
        Key={"case_id": {"S": case.case_id}},
        UpdateExpression="SET version = version + :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )


def _edited_event(ddb) -> None:
    """An audit event edited in place (its hash no longer matches)."""
    assert submit("edited").kind == OutcomeKind.CREATED
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": "PLEDGE#acme#edited"}, "seq": {"N": "1"}},
        UpdateExpression="SET #a = :a",
        ExpressionAttributeNames={"#a": "action"},
        ExpressionAttributeValues={":a": {"S": "pledge_recorded "}},
    )


@pytest.mark.parametrize(
    "tamper,message",
    [
        (_double_booking, "ledger GENERAL#USD"),
        (_change_without_event, "version 2 but 1 events"),
        (_edited_event, "hash mismatch"),
    ],
)
def test_invariant_checker_is_not_vacuous(ddb, tamper, message):
    """Each invariant fails when its property is broken on purpose."""
    tamper(ddb)
    with pytest.raises(AssertionError, match=message):
        assert_invariants(ddb)
