"""Ledger drift detection: each fund's ledger against its recorded
pledges, per region and overall, reading what changed since the last run; a LEDGER_DRIFT
case with the difference and the intents that explain it; the cross-region duplicate
counter. Every test here failed before: there was no such check."""

from __future__ import annotations

from decimal import Decimal

import pytest
from botocore.exceptions import ClientError
from prometheus_client import REGISTRY

from reconciliation import clock
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, CaseType, Queue
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.drift import read as drift_read
from reconciliation.casework.drift.check import ledger_drift_check
from reconciliation.casework.drift.checkpoint import CheckpointRepository
from reconciliation.casework.drift.compare import ALL
from reconciliation.casework.overrides import override_approve, override_request
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.ledger import fund_total
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.stores import case_store, every_store, home_store
from tests import fault_helpers
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM
from tests.reconciliation.factories import submit
from tests.reconciliation.test_regions_routing import keys_homed

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.dynamodb_local_only]

OPERATIONS = ("GetItem", "Query", "BatchGetItem", "PutItem", "TransactWriteItems", "Scan")
DUPLICATES = "dynamo_cross_region_duplicate_detected_total"


@pytest.fixture
def quick(two_regions, settings):
    """Two regions, no settle window and no pause before confirming (tests are serial)."""
    settings.LEDGER_DRIFT_SETTLE_S = 0
    settings.LEDGER_DRIFT_CONFIRM_MS = 0
    return two_regions


def calls() -> dict[str, float]:
    return {
        op: REGISTRY.get_sample_value("dynamo_calls_total", {"operation": op}) or 0.0
        for op in OPERATIONS
    }


def run():
    before = calls()
    report = ledger_drift_check(every_store(), home=home_store, force=True)
    after = calls()
    return report, {op: int(after[op] - before[op]) for op in OPERATIONS}


def duplicates_counted() -> float:
    return REGISTRY.get_sample_value(DUPLICATES) or 0.0


def drift_found() -> float:
    return sum(
        REGISTRY.get_sample_value("ledger_drift_found_total", {"scope": scope}) or 0.0
        for scope in ("all", "region")
    )


def test_a_clean_run_opens_nothing_and_reads_only_what_changed(quick):
    first, _ = run()  # the baseline: nothing to compare yet
    assert first.opened == []
    keys = keys_homed("us-east-1", "clean", 3) + keys_homed("eu-west-1", "clean", 3)
    for key in keys:
        assert submit(key, amount="10.00").kind == OutcomeKind.CREATED
    report, used = run()
    assert report.opened == [] and report.duplicates == []
    assert report.changes == 6
    # One read of the checkpoint and one pledge item per changed intent; Queries of the
    # by_day day shards only (8 per day per region); never a Scan.
    assert used["GetItem"] == 1 + 6
    assert used["Query"] == report.queries <= 2 * 8 * 2
    assert used["Scan"] == 0 and used["TransactWriteItems"] == 0
    again, used = run()
    assert again.opened == [] and again.changes == 0
    # Nothing new: the checkpoint, the by_day index and the ledger, nothing else.
    assert used["GetItem"] == 1
    assert used["BatchGetItem"] == 2  # one fund, one currency, in each region
    assert used["PutItem"] == 1  # the checkpoint advanced


def test_a_tampered_ledger_shard_opens_one_drift_case_with_the_difference(quick):
    run()
    for key in keys_homed("us-east-1", "tamper", 2):
        assert submit(key, amount="10.00").kind == OutcomeKind.CREATED
    assert run()[0].opened == []
    store = AS_SYSTEM.store
    tamper(store, "5")
    report, _ = run()
    [case_id] = report.opened
    case = CaseRepository(store).get(case_id)
    assert case.case_type == CaseType.LEDGER_DRIFT and case.queue == Queue.LEDGER_DRIFT
    drift = case.evidence.drift
    assert drift["scope"] == "" and drift["regions"] == ["us-east-1"]
    assert (drift["fund"], drift["currency"]) == ("GENERAL", "USD")
    assert Decimal(drift["difference"]) == 5
    assert Decimal(drift["ledger_total"]) == 25 and Decimal(drift["pledges_total"]) == 20
    assert case.amount == 5 and case.intent_id == "" and case.claim_pk == ""
    # Reported once: the same difference opens nothing on the next runs.
    assert run()[0].opened == [] and run()[0].opened == []
    # Finance corrects the ledger with its own adjustment, then records it: nothing new.
    tamper(store, "-5")
    assert run()[0].opened == []
    dispose(case_id, "DRIFT_CORRECTED")
    assert run()[0].opened == [] and run()[0].opened == []
    # A later, different difference is a case of its own.
    tamper(store, "2")
    [later] = run()[0].opened
    assert later != case_id
    assert Decimal(CaseRepository(store).get(later).evidence.drift["difference"]) == 2


def tamper(store, amount: str, shard: str = "GENERAL#USD#0") -> None:
    store.client.update_item(
        TableName=store.tables.ledger,
        Key={"fund": {"S": shard}},
        UpdateExpression="ADD pledged_total :a",
        ExpressionAttributeValues={":a": {"N": amount}},
    )


def dispose(case_id: str, disposition: str) -> None:
    case = CaseRepository(AS_SYSTEM.store).get(case_id)
    assert case is not None
    result = case_dispose(
        case_id=case_id,
        disposition=disposition,
        staff=StaffAction(
            actor=staff_actor("fin"),
            reason_code="DATA_CORRECTION",
            reason_text="Checked against the finance journal.",
            seen_version=case.version,
        ),
        store=AS_SYSTEM.store,
    )
    assert result.case.state == CaseState.RESOLVED


def test_one_intent_recorded_in_both_regions_is_named_and_counted_once(quick, settings):
    run()
    settings.ALLOW_FAULT_INJECTION = True
    settings.DDB_UNPINNED = True
    for region in ("us-east-1", "eu-west-1"):
        settings.AWS_REGION = region
        assert submit("twice-1", amount="25.00").kind == OutcomeKind.CREATED
    settings.DDB_UNPINNED = False
    first, second = every_store()
    # Global Tables' last writer wins: the second region's pledge item replaces the first's.
    item = second.client.get_item(
        TableName=second.tables.pledges, Key={"intent_id": {"S": "acme#twice-1"}}
    )["Item"]
    first.client.put_item(TableName=first.tables.pledges, Item=item)
    counted = duplicates_counted()
    report, _ = run()
    assert report.duplicates == ["acme#twice-1"]
    [case_id] = report.opened
    drift = CaseRepository(first).get(case_id).evidence.drift
    assert drift["scope"] == ALL
    assert drift["regions"] == ["eu-west-1", "us-east-1"]
    assert Decimal(drift["difference"]) == 25
    assert Decimal(drift["ledger_total"]) == 50 and Decimal(drift["pledges_total"]) == 25
    [named] = drift["intents"]
    assert (named["intent_id"], named["why"], named["region"]) == (
        "acme#twice-1",
        "duplicate",
        "",
    )
    assert duplicates_counted() == counted + 1
    for _ in range(2):
        again, _ = run()
        assert again.opened == [] and again.duplicates == []
    assert duplicates_counted() == counted + 1
    # Explained (the donor was refunded elsewhere): the difference stays, and stays quiet.
    dispose(case_id, "DRIFT_EXPLAINED")
    assert run()[0].opened == [] and run()[0].opened == []


def test_two_runs_from_one_checkpoint_advance_it_once(quick):
    """A run that read the checkpoint at a version another run has since advanced
    cannot write it: one of two concurrent runs advances it."""
    run()
    submit(keys_homed("us-east-1", "race")[0])
    store = AS_SYSTEM.store
    seen = CheckpointRepository(store).get()
    run()
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        CheckpointRepository(store).put(seen, seen=seen.version)


def test_the_sweep_runs_the_check_when_it_is_due(quick, settings):
    """``manage.py sweep`` (``sweep_all``) runs the check, no more often than
    ``LEDGER_DRIFT_INTERVAL_S``, and reports its cases as opened."""
    settings.LEDGER_DRIFT_INTERVAL_S = 0
    sweep_all(every_store(), home=home_store)
    assert submit(keys_homed("eu-west-1", "sweep")[0]).kind == OutcomeKind.CREATED
    assert sweep_all(every_store(), home=home_store).opened == []
    tamper(every_store()[1], "7", shard="GENERAL#USD@eu-west-1#0")
    settings.LEDGER_DRIFT_INTERVAL_S = 3600
    assert sweep_all(every_store(), home=home_store).opened == []  # not due yet
    settings.LEDGER_DRIFT_INTERVAL_S = 0
    [case_id] = sweep_all(every_store(), home=home_store).opened
    drift = CaseRepository(AS_SYSTEM.store).get(case_id).evidence.drift
    assert drift["regions"] == ["eu-west-1"] and Decimal(drift["difference"]) == 7


def test_a_voided_pledge_leaves_ledger_and_pledges_in_step(quick, settings):
    """A void (PLEDGE_VOIDED on the pledge's stream, the ledger less its amount, in one
    transaction) in the second region is a change like a receipt: nothing drifts."""
    settings.AUTO_RESOLVE_COMMITTED = False
    run()
    [key] = keys_homed("eu-west-1", "void")
    with fault_helpers.injected({"ambiguous_after_commit": 1.0}):  # committed, answer lost
        outcome = submit(key, amount="30.00")
    store = case_store(outcome.case_id)
    case = CaseRepository(store).get(outcome.case_id)
    assert run()[0].opened == []
    why = {"reason_code": "DONOR_REQUEST", "reason_text": "The donor withdrew the pledge."}
    asked = override_request(
        case_id=case.case_id,
        override="VOID_PLEDGE",
        staff=StaffAction(actor=staff_actor("ada"), seen_version=case.version, **why),
        store=store,
    )
    override_approve(
        case_id=case.case_id,
        request_id=asked.case.override.request_id,
        staff=StaffAction(actor=staff_actor("sue", "supervisor"), **why),
        store=store,
    )
    report, _ = run()
    assert report.changes == 1 and report.opened == []
    assert fund_total(every_store(), "GENERAL", "USD").pledged_total == 0


def test_a_commit_landing_between_the_query_and_the_ledger_read_is_no_drift(
    two_regions, settings, monkeypatch
):
    """A commit claimed before the run (its receipt back-dated to the claim) lands after
    the run's Query of the index and before its ledger read: the confirming read of the
    whole window sees it, so the fund is left to the next run, not reported."""
    settings.LEDGER_DRIFT_CONFIRM_MS = 0
    early, late = keys_homed("us-east-1", "inflight", 2)
    assert submit(early, amount="10.00").kind == OutcomeKind.CREATED
    assert run()[0].opened == []
    real = drift_read.ledger_totals
    landed: list[str] = []

    def commit_lands_first(store, keys):
        if not landed:
            landed.append(late)
            with clock.travel(-1):  # claimed a second before the run
                assert submit(late, amount="7.00").kind == OutcomeKind.CREATED
        return real(store, keys)

    monkeypatch.setattr(drift_read, "ledger_totals", commit_lands_first)
    report, _ = run()
    monkeypatch.setattr(drift_read, "ledger_totals", real)
    assert report.opened == [] and [d.split() for d in report.deferred] == [["GENERAL#USD"]]
    assert run()[0].opened == []


def test_two_overlapping_runs_count_one_duplicate_once(quick, settings, monkeypatch):
    """The beat's run and the sweep's may overlap from one checkpoint: only the run whose
    checkpoint write wins counts the duplicate."""
    run()
    settings.ALLOW_FAULT_INJECTION = True
    settings.DDB_UNPINNED = True
    for region in ("us-east-1", "eu-west-1"):
        settings.AWS_REGION = region
        assert submit("overlap-1", amount="25.00").kind == OutcomeKind.CREATED
    settings.DDB_UNPINNED = False
    first, second = every_store()
    key = {"intent_id": {"S": "acme#overlap-1"}}
    item = second.client.get_item(TableName=second.tables.pledges, Key=key)["Item"]
    first.client.put_item(TableName=first.tables.pledges, Item=item)
    seen = CheckpointRepository(first).get()
    counted, found = duplicates_counted(), drift_found()
    winner = run()[0]
    assert winner.duplicates == ["acme#overlap-1"] and winner.opened
    monkeypatch.setattr(CheckpointRepository, "get", lambda _self: seen)  # read before
    late, _ = run()
    assert late.lost_race and late.duplicates == []
    assert duplicates_counted() == counted + 1
    # Its findings too: counted by the run that recorded them only (both counted before).
    assert drift_found() == found + len(winner.opened)


def test_a_first_sight_baseline_taken_while_a_commit_lands_is_taken_later(
    two_regions, settings, monkeypatch
):
    """A fund first seen while a commit lands between the Query and the ledger read: its
    baseline (the ledger less the changes read) would count that pledge twice, and the
    next run report a drift; the confirming read sees it move, so the baseline waits."""
    settings.LEDGER_DRIFT_CONFIRM_MS = 0
    early, late = keys_homed("us-east-1", "sight", 2)
    assert submit(early, amount="10.00").kind == OutcomeKind.CREATED
    real = drift_read.ledger_totals
    landed: list[str] = []

    def commit_lands_first(store, keys):
        if not landed:
            landed.append(late)
            with clock.travel(-1):
                assert submit(late, amount="7.00").kind == OutcomeKind.CREATED
        return real(store, keys)

    monkeypatch.setattr(drift_read, "ledger_totals", commit_lands_first)
    assert run()[0].opened == []  # the first run ever
    monkeypatch.setattr(drift_read, "ledger_totals", real)
    assert run()[0].opened == [] and run()[0].opened == []


def test_a_resolved_drift_case_cannot_be_reopened(quick):
    """An explained drift is the checkpoint's accepted difference: reopening its case
    (then correcting the ledger) reported the correction as a new drift. A later
    difference opens a case of its own instead."""
    from reconciliation.cases.changes import CaseError
    from reconciliation.cases.policy import allowed_actions
    from reconciliation.cases.vocabulary import Override

    run()
    [key] = keys_homed("us-east-1", "reopen")
    assert submit(key, amount="10.00").kind == OutcomeKind.CREATED
    assert run()[0].opened == []
    store = AS_SYSTEM.store
    tamper(store, "5")
    [case_id] = run()[0].opened
    dispose(case_id, "DRIFT_EXPLAINED")
    assert allowed_actions(CaseType.LEDGER_DRIFT, CaseState.RESOLVED, staff_actor().role) == []
    assert allowed_actions("STUCK_PENDING", CaseState.RESOLVED, staff_actor().role) == [
        Override.REOPEN
    ]
    with pytest.raises(CaseError):
        override_request(
            case_id=case_id,
            override=Override.REOPEN,
            staff=StaffAction(
                actor=staff_actor("fin"),
                reason_code="DATA_CORRECTION",
                reason_text="Looking again.",
                seen_version=None,
            ),
            store=AS_SYSTEM.store,
        )
