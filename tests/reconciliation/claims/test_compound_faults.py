"""Defects found by trying two faults in one intent's life, or a fault at a call nobody
injected at: each reproduced here first, then fixed."""

from __future__ import annotations

import json
import uuid

import pytest

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import case_commit_change
from reconciliation.cases.transitions import Grounds, case_disposed
from reconciliation.cases.vocabulary import Disposition
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.sweeps import recheck_open_cases, sweep_all
from reconciliation.claims import intake
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimStatus,
    claim_pk,
    intent_id_for,
)
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.repository import Finalisation
from reconciliation.simulation import faults
from reconciliation.stores import every_store, home_store
from tests import fault_helpers
from tests.fault_helpers import response_lost
from tests.helpers import (
    AS_SYSTEM,
    Acting,
    cases,
    claims,
    ledger_total,
    pledges,
    repositories,
    spend_token,
)
from tests.reconciliation.factories import crashed_claim, stuck_case, submit

pytestmark = pytest.mark.django_db(databases=[])

STAFF = Actor(username="ada", role=Role.FINANCE_STAFF, address="10.0.0.7")


def _pk(key: str) -> str:
    return claim_pk("acme", OPERATION_CREATE_PLEDGE, key)


@pytest.mark.dynamodb_local_only  # the lost response is a real HTTP exchange
def test_a_reclaim_whose_response_is_lost_is_recognised_as_the_callers_own(ddb):
    """The re-claim of an expired key applies but its response is lost; the SDK sends it
    again, the fence refuses it, and the item it returns is this request's attempt: the
    request goes on and commits instead of answering 409 for a lease nobody holds."""
    crashed_claim("own-reclaim-1")
    with clock.travel(61), response_lost(ddb.client, "UpdateItem") as lost:
        outcome = submit("own-reclaim-1")
    assert lost == [200]  # the re-claim reached the engine and was applied
    assert outcome.kind == OutcomeKind.CREATED
    [claim] = claims(ddb)
    assert claim["status"] == "COMPLETED" and claim["version"] == 3
    assert ledger_total(ddb) == (pytest.approx(25), 1)


@pytest.mark.token_semantics
def test_a_late_token_mismatch_is_its_own_case_beside_the_stuck_case(ddb):
    """The sweep opened STUCK_PENDING for a dead worker's claim version; the worker then
    comes back and its commit meets IdempotentParameterMismatch: a TOKEN_MISMATCH case of
    its own, which the re-check leaves for a person, never merged into the stuck case."""
    with clock.travel(-200):
        crashed_claim("late-mismatch-1")
    repos = repositories()
    claim = repos.claims.get(_pk("late-mismatch-1"))
    [stuck_id] = sweep_all(every_store(), home=home_store).opened
    # Another transaction used the late worker's token inside the 10-minute window.
    spend_token(ddb, claim.request_token)
    late = intake.pledge_commit(repos, claim)
    assert late.kind == OutcomeKind.TOKEN_PARAMETER_MISMATCH
    assert late.case_id and late.case_id != stuck_id
    recheck_open_cases(repos)
    by_type = {c["case_type"]: c for c in cases(ddb)}
    assert set(by_type) == {"STUCK_PENDING", "TOKEN_MISMATCH"}
    assert by_type["TOKEN_MISMATCH"]["state"] == "OPEN"
    assert by_type["TOKEN_MISMATCH"]["case_id"] == late.case_id


def test_retry_commit_never_confirms_a_completed_claim_whose_pledge_is_missing(ddb):
    """A case's claim says COMPLETED but a consistent read finds no pledge: RETRY_COMMIT
    commits the pledge (a new attempt) before it resolves the case, never resolves on the
    claim's word alone."""
    case = stuck_case("completed-no-pledge-1")
    repos = repositories()
    claim = repos.claims.get(case.claim_pk)
    repos.claims.finalise(
        claim,
        Finalisation(
            status=ClaimStatus.COMPLETED,
            error_code="test",
            expires_in_s=3600,
            require_pending=False,
            response_body={"intent_id": "completed-no-pledge-1"},
        ),
    )
    assert pledges(ddb) == []
    case_dispose(
        disposition="RETRY_COMMIT",
        **Acting(STAFF).on(
            case,
            reason_code="TRANSIENT_FAILURE",
            reason_text="The claim says completed but no pledge exists.",
        ),
    )
    [pledge] = pledges(ddb)
    assert pledge["intent_id"] == intent_id_for("acme", "completed-no-pledge-1")
    resolved = repos.cases.get(case.case_id)
    assert resolved.state == "RESOLVED"
    assert resolved.resolution.outcome == OutcomeKind.CREATED
    assert ledger_total(ddb) == (pytest.approx(25), 1)


class HotCounter:
    """The first queue counter item a case transaction touches stays hot: every later
    transaction touching that same item is cancelled with TransactionConflict, as a burst
    of case openings does on AWS (DynamoDB Local never raises it by itself)."""

    def __init__(self):
        self.hot: str | None = None
        self.conflicts = 0

    def __call__(self, request, **_kwargs):
        body = json.loads(request.body or b"{}")
        items = body.get("TransactItems", [])
        keys = [
            item["Update"]["Key"]["case_id"]["S"]
            if "Update" in item
            and item["Update"]["Key"].get("case_id", {}).get("S", "").startswith("#COUNT#")
            else None
            for item in items
        ]
        touched = [k for k in keys if k]
        if not touched:
            return None
        self.hot = self.hot or touched[0]
        if self.hot not in touched:
            return None
        self.conflicts += 1
        reasons = [
            {"Code": "TransactionConflict", "Message": "hot item"}
            if k == self.hot
            else {"Code": "None"}
            for k in keys
        ]
        return faults.error_response(
            request,
            400,
            "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "Transaction cancelled, please refer cancellation reasons for specific reasons",
            CancellationReasons=reasons,
        )


# moto answers a request even when a before-send hook already did: DynamoDB Local only.
@pytest.mark.dynamodb_local_only
def test_a_hot_queue_counter_cannot_keep_a_case_from_opening(ddb, settings):
    """The queue's counter item conflicts on every transaction that touches it (a burst of
    openings made it hot): the case still opens, its count moved on another shard."""
    settings.DDB_APP_RETRY_BASE_S = 0.001
    settings.DDB_APP_RETRY_CAP_S = 0.002
    with clock.travel(-200):
        for n in range(3):
            crashed_claim(f"hot-counter-{n}")
    hot = HotCounter()
    event = "before-send.dynamodb.TransactWriteItems"
    ddb.client.meta.events.register_first(event, hot)
    try:
        report = sweep_all(every_store(), home=home_store)
    finally:
        ddb.client.meta.events.unregister(event, hot)
    assert hot.conflicts >= 1
    assert report.errors == []
    assert len(report.opened) == 3
    assert {c["case_type"] for c in cases(ddb)} == {"STUCK_PENDING"}
    assert repositories().cases.counts()["STUCK_PENDING"] == 3


def test_queue_counts_stay_exact_across_shards(ddb):
    """Cases opened and resolved land their counter moves on different shards; the count
    is their sum, and an unsharded counter item from before sharding still counts."""
    opened = [stuck_case(f"shards-{n}") for n in range(6)]
    repos = repositories()
    counter_items = [
        c for c in _scan_cases(ddb) if c["case_id"].startswith("#COUNT#STUCK_PENDING#")
    ]
    assert len(counter_items) > 1  # not every change touches one item
    for case in opened[:2]:
        case_dispose(
            disposition="ESCALATE",
            **Acting(STAFF).on(
                case, reason_code="NEEDS_REVIEW", reason_text="Escalated to check the counts."
            ),
        )
    ddb.client.put_item(
        TableName=ddb.tables.cases,
        Item={"case_id": {"S": "#COUNT#STUCK_PENDING"}, "open_count": {"N": "10"}},
    )
    counts = repos.cases.counts()
    assert counts["STUCK_PENDING"] == 4 + 10
    assert counts["ESCALATED"] == 2


def _scan_cases(ddb) -> list[dict]:
    from tests.helpers import scan_all

    return scan_all(ddb, ddb.tables.cases)


def test_a_crash_token_is_never_reused_by_the_next_attempt(ddb):
    """A re-claim is a different transaction, so it carries a token of its own: no token
    ever names two different transactions, on any engine (docs/design.md §3)."""
    crashed_claim("fresh-token-1")
    first = repositories().claims.get(_pk("fresh-token-1"))
    with clock.travel(61):
        assert submit("fresh-token-1").kind == OutcomeKind.CREATED
    [claim] = claims(ddb)
    [pledge] = pledges(ddb)
    assert claim["request_token"] != first.request_token
    assert pledge["request_token"] == claim["request_token"]
    assert uuid.UUID(claim["request_token"])


def test_a_late_workers_unclear_commit_joins_the_stuck_case_of_its_claim_version(ddb):
    """The sweep opened STUCK_PENDING for a stalled worker's claim version; the worker wakes
    and its commit's outcome is unknown: the same question ("did it commit?") about the same
    claim version, so one open case, not a second beside it."""
    with clock.travel(-200):
        crashed_claim("late-unclear-1")
    repos = repositories()
    claim = repos.claims.get(_pk("late-unclear-1"))
    [stuck_id] = sweep_all(every_store(), home=home_store).opened
    with fault_helpers.injected({"ambiguous_no_commit": 1.0}):
        late = intake.pledge_commit(repositories(), claim)
    assert late.kind == OutcomeKind.OUTCOME_UNKNOWN
    assert late.case_id == stuck_id
    [case] = cases(ddb)
    assert (case["case_type"], case["state"]) == ("STUCK_PENDING", "OPEN")
    [stored] = claims(ddb)
    assert stored["case_id"] == stuck_id and "pending_shard" not in stored


@pytest.mark.token_semantics
def test_a_retry_never_closes_its_case_in_favour_of_a_resolved_one(ddb):
    """A token-mismatch case was resolved as a correctly refused duplicate (recorded
    before dispositions were checked against evidence: no pledge backs it); a retry of the
    stuck case meets the same mismatch: the stuck case stays open (it is the intent's only
    open case), never closed as superseded by the resolved one."""
    with clock.travel(-200):
        crashed_claim("no-supersede-1")
    repos = repositories()
    claim = repos.claims.get(_pk("no-supersede-1"))
    [stuck_id] = sweep_all(every_store(), home=home_store).opened
    spend_token(ddb, claim.request_token)
    mismatch = intake.pledge_commit(repos, claim)
    assert mismatch.kind == OutcomeKind.TOKEN_PARAMETER_MISMATCH
    mismatch_case = repos.cases.get(mismatch.case_id)
    # The evidence rule now refuses this disposition without a pledge, so the old
    # resolution is written as it was stored then, through the one change service.
    refused = Disposition.DUPLICATE_REJECTED_OK
    resolved = case_disposed(mismatch_case, Grounds(STAFF, clock.now()), refused)
    case_commit_change(AS_SYSTEM.store, mismatch_case, *resolved)
    stuck = repos.cases.get(stuck_id)
    case_dispose(
        case_id=stuck_id,
        disposition="RETRY_COMMIT",
        staff=StaffAction(
            actor=STAFF,
            reason_code="TRANSIENT_FAILURE",
            reason_text="Retry the stuck commit, please.",
            seen_version=stuck.version,
        ),
        store=AS_SYSTEM.store,
    )
    after = repos.cases.get(stuck_id)
    assert after.state == "OPEN"
    assert after.resolution is None
    assert after.retry.status == OutcomeKind.TOKEN_PARAMETER_MISMATCH
    assert [c["case_id"] for c in cases(ddb) if c["state"] != "RESOLVED"] == [stuck_id]
