"""Two hands on one case at once: every case decision is a compare-and-set on what its
decider read, a resolution stands until an audited reopen, and a disposition is only
recorded where the evidence allows it.

Each interleaving is made deterministic by running the second hand from inside the first,
at the moment named in the test (a wrapper around the call the first hand is about to make).
"""

from __future__ import annotations

import pytest

from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseError
from reconciliation.cases.policy import offered_actions
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, Disposition, Override
from reconciliation.casework import retries
from reconciliation.casework.dispositions import case_dispose, cases_bulk
from reconciliation.casework.evidence import evidence_facts
from reconciliation.casework.overrides import override_approve, override_request
from reconciliation.casework.sweeps import recheck_open_cases, sweep_all
from reconciliation.claims import intake
from reconciliation.claims.outcomes import IntakeOutcome, OutcomeKind
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.stores import every_store, home_store
from tests import fault_helpers
from tests.helpers import (
    AS_SYSTEM,
    Acting,
    acting,
    audit_events,
    cases,
    ledger_total,
    pledges,
    repositories,
)
from tests.reconciliation.factories import crashed_claim, stuck_case, submit

pytestmark = pytest.mark.django_db(databases=[])

STAFF = acting("ada")
STAFF2 = acting("bob")
SUPER = acting("sue", "supervisor")
WHY = dict(reason_code="TRANSIENT_FAILURE", reason_text="The commit met a transient failure.")
RESOLVING = {
    "retry_commit_succeeded",
    "disposition_recorded",
    "override_approved",
    "retry_commit_failed",
}


def _actions(ddb, case_id: str) -> list[str]:
    return [e["action"] for e in audit_events(ddb, f"CASE#{case_id}")]


def _resolutions(ddb, case_id: str) -> list[dict]:
    """The events that left the case RESOLVED while it was not: one per resolution."""
    return [
        e
        for e in audit_events(ddb, f"CASE#{case_id}")
        if (e.get("after") or {}).get("state") == "RESOLVED"
        and (e.get("before") or {}).get("state") != "RESOLVED"
    ]


def _resolving_writes(ddb, case_id: str) -> list[dict]:
    """Events that wrote a resolution, whether or not the case was already resolved."""
    return [
        e
        for e in audit_events(ddb, f"CASE#{case_id}")
        if (e.get("after") or {}).get("state") == "RESOLVED"
        and (e.get("after") or {}).get("resolution") != (e.get("before") or {}).get("resolution")
    ]


def _ask_retry(case, monkeypatch, actor=STAFF.actor):
    """Staff ask for RETRY_COMMIT; the task is queued, not run (the broker holds it)."""
    monkeypatch.setattr("reconciliation.casework.dispositions.enqueue_retry", lambda *a, **k: None)
    return case_dispose(
        disposition=Disposition.RETRY_COMMIT,
        **Acting(actor).on(case, action_id=f"retry-{case.case_id}", **WHY),
    ).case


def _during_commit(monkeypatch, second_hand):
    """Run ``second_hand`` once, right after the first retry's commit returned."""
    real = intake.pledge_commit
    state = {"done": False}

    def commit_then_interleave(store, claim, **kwargs):
        outcome = real(store, claim, **kwargs)
        if not state["done"]:
            state["done"] = True
            second_hand()
        return outcome

    monkeypatch.setattr(intake, "pledge_commit", commit_then_interleave)


def _after_first_case_read(monkeypatch, second_hand):
    """Run ``second_hand`` once, right after the first hand read the case."""
    real_get = CaseRepository.get
    state = {"done": False}

    def read_then_interleave(self, case_id, **kwargs):
        case = real_get(self, case_id, **kwargs)
        if not state["done"]:
            state["done"] = True
            with monkeypatch.context() as inner:
                inner.setattr(CaseRepository, "get", real_get)
                second_hand()
        return case

    monkeypatch.setattr(CaseRepository, "get", read_then_interleave)


def test_a_retry_delivered_twice_at_once_resolves_the_case_once(ddb, monkeypatch):
    """Two runs of one RETRY_COMMIT (a redelivered task, or the Drill page's inline run
    beside the queued task) interleave; the case is resolved exactly once, with one
    retry_commit_succeeded event, and the pledge is recorded once."""
    case = _ask_retry(stuck_case("mh-1"), monkeypatch)
    second = []
    _during_commit(
        monkeypatch,
        lambda: second.append(retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)),
    )
    first = retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)

    assert _actions(ddb, case.case_id).count("retry_commit_succeeded") == 1
    assert len(_resolving_writes(ddb, case.case_id)) == 1
    assert len(pledges(ddb)) == 1 and ledger_total(ddb)[1] == 1
    assert {first.kind, second[0].kind} & {"committed", "already_committed"}
    stored = repositories().cases.get(case.case_id)
    assert stored.state == CaseState.RESOLVED and stored.version == 3


def test_a_retry_racing_the_recheck_leaves_the_first_resolution_standing(ddb, monkeypatch):
    """The open-case re-check auto-resolves the case (the pledge is now there) while the
    retry that recorded it is still finishing; the retry writes nothing, and the re-check's
    resolution stands."""
    case = _ask_retry(stuck_case("mh-2"), monkeypatch)
    _during_commit(monkeypatch, lambda: recheck_open_cases(AS_SYSTEM.store))
    retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)

    resolved = _resolving_writes(ddb, case.case_id)
    assert [e["action"] for e in resolved] == ["disposition_recorded"]
    assert "retry_commit_succeeded" not in _actions(ddb, case.case_id)
    stored = repositories().cases.get(case.case_id)
    assert stored.resolution.disposition == "CONFIRMED_COMMITTED"


def test_a_supervisor_approval_is_never_replaced_by_a_retry(ddb, monkeypatch):
    """RELEASE_CLAIM is asked while a RETRY_COMMIT is queued, and a supervisor approves it
    while the retry runs. Either the request is refused while the retry is in flight, or the
    approval stands: never a system resolution over a four-eyes one, and never an orphan
    case left open for the intent."""
    case = _ask_retry(stuck_case("mh-3"), monkeypatch)
    try:
        asked = override_request(override=Override.RELEASE_CLAIM, **STAFF2.on(case, **WHY)).case
    except CaseError as refused:
        assert "retry" in str(refused).lower()
        retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)
        assert repositories().cases.get(case.case_id).state == CaseState.RESOLVED
        return

    _after_first_case_read(
        monkeypatch,
        lambda: override_approve(
            request_id=asked.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
        ),
    )
    retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)

    stored = repositories().cases.get(case.case_id)
    assert stored.resolution.disposition == Override.RELEASE_CLAIM
    assert stored.resolution.by == SUPER.actor.username
    assert len(_resolving_writes(ddb, case.case_id)) == 1
    open_cases = [c for c in cases(ddb) if c["state"] != "RESOLVED"]
    assert open_cases == []


def test_a_redelivered_retry_after_its_run_ended_writes_nothing_while_a_release_is_decided(
    ddb, monkeypatch
):
    """The same race in its redelivery form: a retry ran and was throttled, staff then asked
    to release the claim, and a redelivered copy of the finished retry runs while the
    supervisor approves; the old delivery records nothing, the approval stands."""
    case = _ask_retry(stuck_case("mh-3b"), monkeypatch)
    throttled = IntakeOutcome(OutcomeKind.THROTTLED, retry_after=1)
    with monkeypatch.context() as patched:  # DynamoDB throttled the retry's commit
        patched.setattr(intake, "pledge_commit", lambda *a, **k: throttled)
        retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)
    case = repositories().cases.get(case.case_id)
    assert case.retry.finished_at and case.state == CaseState.OPEN
    asked = override_request(override=Override.RELEASE_CLAIM, **STAFF2.on(case, **WHY)).case
    _after_first_case_read(
        monkeypatch,
        lambda: override_approve(
            request_id=asked.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
        ),
    )
    retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)

    assert pledges(ddb) == []
    stored = repositories().cases.get(case.case_id)
    assert stored.resolution.disposition == Override.RELEASE_CLAIM
    assert len(_resolving_writes(ddb, case.case_id)) == 1
    assert [c for c in cases(ddb) if c["state"] != "RESOLVED"] == []


def test_a_late_workers_commit_after_the_client_recorded_the_pledge_leaves_no_open_case(ddb):
    """A worker stalls past its lease; the sweep opens STUCK_PENDING and the client's retry
    records the pledge; the late worker then commits and is truthfully answered 'replayed'.
    After the next sweep no case about the intent is left open."""
    key = "mh-4"
    with clock.travel(-200):
        crashed_claim(key)
        late_claim = ClaimRepository(home_store(key)).get(f"acme#create_pledge#{key}")
    sweep_all(every_store(), home=home_store)
    assert submit(key).kind == OutcomeKind.CREATED

    late = intake.pledge_commit(home_store(key), late_claim)
    assert late.kind == OutcomeKind.REPLAYED
    sweep_all(every_store(), home=home_store)

    assert [c["case_type"] for c in cases(ddb) if c["state"] != "RESOLVED"] == []
    assert len(pledges(ddb)) == 1 and ledger_total(ddb)[1] == 1


def _conflict_case(key: str):
    """A CANCELLED_TRANSACTION case whose transaction kept conflicting: nothing written."""
    with fault_helpers.injected({"transaction_conflict": 1.0}):
        outcome = submit(key)
    assert outcome.kind == OutcomeKind.CONFLICT
    return repositories().cases.get(outcome.case_id)


# Injected HTTP-level faults need an engine reached over HTTP (moto applies every
# request it sees, whatever the fault answers: docs/design.md §10).
@pytest.mark.engines("dynamodb_local")
def test_duplicate_rejected_is_never_recorded_without_a_pledge(ddb):
    """A cancelled transaction that wrote nothing (TransactionConflict, no pledge) is not 'a
    duplicate correctly rejected': the page does not offer it, the bulk preview says it is
    not possible and why, and a POST asking anyway is refused and writes nothing."""
    case = _conflict_case("mh-5")
    assert PledgeRepository(AS_SYSTEM.store).get(case.intent_id, consistent=True) is None
    facts = evidence_facts(case=case, pledge=None, claim=None)
    assert Disposition.DUPLICATE_REJECTED_OK not in offered_actions(
        case.case_type, case.state, STAFF.actor.role, facts
    )

    [row] = cases_bulk(
        case_ids=[case.case_id],
        disposition=Disposition.DUPLICATE_REJECTED_OK,
        staff=StaffAction(actor=STAFF.actor, **WHY),
        dry_run=True,
        store_for=lambda _id: AS_SYSTEM.store,
    )
    assert not row.ok and "no pledge" in row.message.lower()

    with pytest.raises(CaseError, match="(?i)no pledge"):
        case_dispose(disposition=Disposition.DUPLICATE_REJECTED_OK, **STAFF.on(case, **WHY))
    [applied] = cases_bulk(
        case_ids=[case.case_id],
        disposition=Disposition.DUPLICATE_REJECTED_OK,
        staff=StaffAction(actor=STAFF.actor, **WHY),
        dry_run=False,
        store_for=lambda _id: AS_SYSTEM.store,
    )
    assert not applied.ok
    assert _actions(ddb, case.case_id) == ["case_opened"]


def test_a_system_resolution_never_replaces_a_resolution(ddb, monkeypatch):
    """A resolution stands: a system actor deciding from a stale read of an open case
    finds it resolved at write time and writes nothing."""
    settings_case = stuck_case("mh-6")
    stale = repositories().cases.get(settings_case.case_id)
    # The pledge is recorded by the client's own retry, and the re-check resolves the case.
    with clock.travel(300):
        assert submit("mh-6").kind == OutcomeKind.CREATED
        recheck_open_cases(AS_SYSTEM.store)
        resolved = repositories().cases.get(stale.case_id)
        assert resolved.state == CaseState.RESOLVED
        with pytest.raises(CaseError):
            case_dispose(
                disposition="CONFIRMED_COMMITTED",
                **Acting(system_actor()).on(
                    stale,
                    reason_code="EVIDENCE_CONFIRMS",
                    reason_text="Automatic: a stale read of the case.",
                ),
            )
    assert len(_resolving_writes(ddb, stale.case_id)) == 1


def test_a_late_worker_beside_a_failed_retry_opens_no_second_case(ddb, monkeypatch):
    """Found by ``explore_faults --actors 2`` (late×asked-retry): a worker stalls past its
    lease, the sweep opens STUCK_PENDING, a RETRY_COMMIT re-claims the key and fails (its
    attempt names the case). The late worker's commit then loses its claim to that
    attempt: it is answered in progress, pointing at the case that follows the intent,
    and opens no CANCELLED_TRANSACTION case of its own, which stayed open as an orphan
    once the first case was decided (a release approved)."""
    key = "mh-3c"
    with clock.travel(-900):  # past the claim's 10-minute token window: the retry re-claims
        crashed_claim(key)
        late_claim = ClaimRepository(home_store(key)).get(f"acme#create_pledge#{key}")
    sweep_all(every_store(), home=home_store)
    (stuck,) = cases(ddb)
    case = _ask_retry(repositories().cases.get(stuck["case_id"]), monkeypatch)
    throttled = IntakeOutcome(OutcomeKind.THROTTLED, retry_after=1)
    with monkeypatch.context() as patched:  # DynamoDB throttled the retry's commit
        patched.setattr(intake, "pledge_commit", lambda *a, **k: throttled)
        retries.retry_commit_run(case.case_id, store=AS_SYSTEM.store)
    kept = ClaimRepository(home_store(key)).get(late_claim.pk)
    assert kept.case_id == case.case_id and kept.attempt_id != late_claim.attempt_id

    late = intake.pledge_commit(home_store(key), late_claim)

    assert late.kind == OutcomeKind.IN_PROGRESS and late.case_id == case.case_id
    assert [c["case_id"] for c in cases(ddb) if c["state"] != "RESOLVED"] == [case.case_id]
    assert pledges(ddb) == []
