"""The fault explorer (``manage.py explore_faults``): how it names calls and prunes pairs,
and whole runs on DynamoDB Local — depth 1 must find nothing, and a fence broken on
purpose must be found."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import time
import uuid

import pytest
from django.core.management import call_command

from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimBody,
    ClaimKey,
    ClaimStatus,
    claim_pk,
    pending_shard,
)
from reconciliation.claims.outcomes import IntakeOutcome, OutcomeKind
from reconciliation.claims.repository import ClaimRepository, Finalisation
from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.items import to_item
from reconciliation.simulation import explorer
from reconciliation.simulation.explorer import (
    FAULT_KINDS,
    WRITE_ONLY,
    CallRecord,
    ExploreConfig,
    Fault,
    Point,
    Result,
    call_shape,
    client_next,
    depth_one,
    explore,
    scenario_id,
    scenario_key,
    scenario_parse,
    second_faults,
)
from reconciliation.simulation.invariants import (
    Answer,
    Snapshot,
    answer_problems,
    case_type_problems,
    ledger_problems,
    lost_problems,
    unrecorded_problems,
)
from reconciliation.stores import Store

ROLES = {
    "t-idempotency_keys": "idempotency_keys",
    "t-pledges": "pledges",
    "t-ledger": "ledger",
    "t-cases": "cases",
    "t-audit_events": "audit_events",
}


class _Capture:
    """A stand-in DynamoDB client that keeps each request's parameters: for DynamoDB's
    JSON protocol they are the request body the explorer names."""

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []

    def put_item(self, **kwargs):
        self.requests.append(("PutItem", kwargs))
        return {}

    def update_item(self, **kwargs):
        self.requests.append(("UpdateItem", kwargs))
        return {"Attributes": self.item}


def _claim_requests() -> list[tuple[str, dict]]:
    """The claim writes of the real repository: put, re-claim, finalise, attach."""
    capture = _Capture()
    repo = ClaimRepository(Store(capture, TableNames.from_prefix("t-")))
    claim = repo.new_claim(
        key=ClaimKey.of_pledge("acme", "k-1"),
        body=ClaimBody(
            payload_hash="h",
            request={"donor_ref": "D", "fund": "GENERAL", "amount": "1.00", "currency": "USD"},
        ),
        correlation_id="c",
        client_address="",
    )
    capture.item = repo._to_item(claim)
    repo.create(claim)
    repo.reclaim(claim, attempt=claim)
    repo.finalise(claim, Finalisation(status=ClaimStatus.FAILED, expires_in_s=30))
    repo.attach_case(claim, case_id="C-1", error_code="X")
    return capture.requests


def _shape(operation: str, body: dict):
    return call_shape(operation, body, ROLES, "P#7")


def _record(point: str, *, write: bool = True, digest: str = "d", fault: str | None = None):
    parsed = Point.parse(point)
    return CallRecord(
        point, parsed.episode, parsed.label, "X", write, digest, fault=fault, sent=True
    )


# --- naming -------------------------------------------------------------------------------


def test_point_fault_and_scenario_ids_round_trip():
    """A repro line's id parses back into the very plan that produced it."""
    plan = (
        Fault(Point("POST#1", "commit", 1), "http500_after"),
        Fault(Point("POST#1", "commit", 2), "throttle_exhausted"),
    )
    sid = scenario_id(plan)
    assert sid == "POST#1 commit#1:http500_after+POST#1 commit#2:throttle_exhausted"
    assert scenario_parse(sid) == plan
    assert scenario_parse("fault-free") == () and scenario_id(()) == "fault-free"
    assert Point.parse("sweep#1 queue walk STUCK_PENDING#2") == Point(
        "sweep#1", "queue walk STUCK_PENDING", 2
    )
    with pytest.raises(ValueError):
        scenario_parse("POST#1 commit#1:melted")


def test_claim_writes_are_named_by_what_their_expression_does():
    """The real repository's put, re-claim, finalise and attach get their own labels."""
    labels = [_shape(op, body).label for op, body in _claim_requests()]
    assert labels == ["claim put", "re-claim", "finalise", "attach"]


def test_transactions_are_named_and_their_hot_item_found():
    """A commit conflicts on its ledger item, a case transaction on its counter."""
    commit = {
        "TransactItems": [
            {"Put": {"TableName": "t-pledges", "Item": {"intent_id": {"S": "a#k"}}}},
            {"Update": {"TableName": "t-ledger", "Key": {"fund": {"S": "GENERAL#USD#3"}}}},
            {"Put": {"TableName": "t-audit_events", "Item": {"stream": {"S": "P"}}}},
            {"Update": {"TableName": "t-idempotency_keys", "Key": {"pk": {"S": "a#c#k"}}}},
        ]
    }
    opened = {
        "TransactItems": [
            {
                "Put": {
                    "TableName": "t-cases",
                    "Item": {"case_id": {"S": "C-1"}, "case_type": {"S": "STUCK_PENDING"}},
                    "ConditionExpression": "attribute_not_exists(case_id)",
                }
            },
            {"Put": {"TableName": "t-audit_events", "Item": {"stream": {"S": "CASE#C-1"}}}},
            {"Update": {"TableName": "t-cases", "Key": {"case_id": {"S": "#COUNT#STUCK#2"}}}},
        ]
    }
    change = {"TransactItems": [{"Put": {"TableName": "t-cases", "Item": {}}}]}
    shape = _shape("TransactWriteItems", commit)
    assert (shape.label, shape.hot, shape.write) == ("commit", 1, True)
    assert shape.items[1] == 't-ledger|{"fund": {"S": "GENERAL#USD#3"}}'
    shape = _shape("TransactWriteItems", opened)
    assert (shape.label, shape.hot, shape.case_open) == ("case open", 2, ("C-1", "STUCK_PENDING"))
    assert _shape("TransactWriteItems", change).label == "case change"


def test_reads_are_named_per_table_and_identical_reads_are_one_point():
    """GetItem per table, the pending index by shard (all other shards one point), queue
    walks by queue; a repeated identical read is the same point, a write never is."""
    wire = explorer.Wire(explorer.TableNames.from_prefix("t-"))
    wire.begin("sweep#1")

    def point(operation, body):
        return wire._record(operation, _shape(operation, body), "d").point

    def pending(shard, bound):
        values = {":s": {"S": shard}, ":t": {"N": str(bound)}}
        return {
            "TableName": "t-idempotency_keys",
            "IndexName": "pending_by_expiry",
            "ExpressionAttributeValues": values,
        }

    claim = {"TableName": "t-idempotency_keys", "Key": {"pk": {"S": "a"}}}
    assert point("GetItem", claim) == "sweep#1 claim read#1"
    assert point("GetItem", claim) == "sweep#1 claim read#1"
    assert point("GetItem", {**claim, "Key": {"pk": {"S": "b"}}}) == "sweep#1 claim read#2"
    assert point("Query", pending("P#0", 1)) == "sweep#1 pending query other#1"
    assert point("Query", pending("P#1", 2)) == "sweep#1 pending query other#1"
    assert point("Query", pending("P#7", 3)) == "sweep#1 pending query own#1"
    walk = {
        "TableName": "t-cases",
        "IndexName": "open_by_queue",
        "ExpressionAttributeValues": {":q": {"S": "STUCK_PENDING"}},
    }
    assert point("Query", walk) == "sweep#1 queue walk STUCK_PENDING#1"
    put = {"TableName": "t-idempotency_keys", "Item": {}}
    assert point("PutItem", put) == "sweep#1 claim put#1"
    assert point("PutItem", put) == "sweep#1 claim put#2"
    wire.begin("POST#2")
    assert point("GetItem", claim) == "POST#2 claim read#1"


def test_every_scenario_key_lands_in_the_same_pending_shard():
    """Fresh keys per scenario, yet the sweep meets the intent's shard at the same place."""
    keys = {scenario_key(f"s{n}", 0) for n in range(20)}
    assert len(keys) == 20
    shards = {pending_shard(claim_pk("explorer", OPERATION_CREATE_PLEDGE, k)) for k in keys}
    assert shards == {explorer.OWN_SHARD}


# --- which scenarios ----------------------------------------------------------------------


def test_depth_one_is_every_applicable_kind_at_every_point_of_the_fault_free_life():
    """Writes get all eleven kinds; reads skip the kinds that equal another on a read."""
    baseline = Result(
        "fault-free",
        calls=[
            _record("POST#1 claim put#1"),
            _record("POST#1 commit#1"),
            _record("sweep#1 pending query other#1", write=False),
            _record("sweep#1 pending query other#1", write=False),
        ],
    )
    ids = depth_one(baseline)
    assert len(ids) == 2 * len(FAULT_KINDS) + len(FAULT_KINDS) - len(WRITE_ONLY)
    assert "sweep#1 pending query other#1:timeout_after" not in ids
    assert "POST#1 commit#1:lost_then_throttle" in ids


def test_second_faults_stay_after_the_first_inside_its_episode():
    """No second fault before the first, at a read point met before it, or after the
    request ended; every kind at each later point of the same request."""
    result = Result(
        "POST#1 commit#1:timeout_before",
        calls=[
            _record("POST#1 claim read#1", write=False),
            _record("POST#1 commit#1", fault="timeout_before"),
            _record("POST#1 claim read#1", write=False),
            _record("POST#1 commit#2"),
            _record("GET#1 pledge read#1", write=False),
        ],
    )
    seconds = second_faults(result)
    assert {scenario_parse(s)[1].point for s in seconds} == {Point("POST#1", "commit", 2)}
    assert len(seconds) == len(FAULT_KINDS)
    assert all(s.startswith("POST#1 commit#1:timeout_before+") for s in seconds)


def test_no_second_throttle_on_a_call_the_first_already_throttles_past_its_budget():
    """After throttle_exhausted, an identical retry is throttled anyway: another throttle
    there cannot happen; other kinds there, and throttles on other calls, can."""
    result = Result(
        "POST#1 commit#1:throttle_exhausted",
        calls=[
            _record("POST#1 commit#1", digest="same", fault="throttle_exhausted"),
            _record("POST#1 commit#2", digest="same", fault="throttled"),
            _record("POST#1 case open#1", digest="other"),
        ],
    )
    kinds = {}
    for sid in second_faults(result):
        second = scenario_parse(sid)[1]
        kinds.setdefault(second.point.label, set()).add(second.kind)
    throttles = {"throttle_once", "throttle_exhausted", "lost_then_throttle"}
    assert kinds["commit"] == set(FAULT_KINDS) - throttles
    assert kinds["case open"] == set(FAULT_KINDS)


def test_a_first_fault_that_ends_the_request_has_no_second():
    """A crash ends the request: nothing of it comes after."""
    result = Result(
        "POST#1 claim put#1:crash_after",
        calls=[_record("POST#1 claim put#1", fault="crash_after"), _record("POST#2 claim put#1")],
    )
    assert second_faults(result) == []
    assert second_faults(Result("POST#1 claim put#1:crash_after")) == []  # never fired


@pytest.mark.parametrize(
    "status,error,method,expected",
    [
        (None, None, "POST", ("POST", 0)),
        (201, None, "POST", (None, 0)),
        (202, "outcome_unknown", "POST", ("GET", 0)),
        (409, "request_in_progress", "POST", ("POST", 17)),
        (503, "throttled", "POST", ("POST", 17)),
        (409, "transaction_cancelled", "POST", ("POST", 17)),
        (422, "idempotency_key_reused", "POST", (None, 0)),
        (500, "transaction_rejected", "POST", (None, 0)),
        (404, "not_found", "GET", ("POST", 0)),
        (503, "dynamodb_unavailable", "GET", ("GET", 17)),
        (200, None, "GET", (None, 0)),
    ],
)
def test_the_client_follows_the_api_contract(status, error, method, expected):
    """Retry-After on 409/503, GET after 202, POST again after a 404 or no answer."""
    answer = Answer("X#1", method, status, error, retry_after=17)
    assert client_next(answer) == expected


# --- invariants ---------------------------------------------------------------------------

DOCUMENTED = frozenset({"throttled", "outcome_unknown", "not_found"})


def _snapshot(**tables: list[dict]) -> Snapshot:
    return Snapshot(raw={role: [to_item(i) for i in items] for role, items in tables.items()})


def test_a_definite_failure_after_a_commit_that_applied_or_may_have_is_a_lie():
    """503 after an applied commit, or after one hidden by a timeout, is untruthful; 202
    is always allowed; success needs the pledge; every error is documented JSON."""
    applied = Answer("POST#1", "POST", 503, "throttled", commit_applied=True, commit_maybe=True)
    maybe = Answer("POST#2", "POST", 503, "throttled", commit_maybe=True)
    unknown = Answer("POST#3", "POST", 202, "outcome_unknown", commit_maybe=True)
    hollow = Answer("POST#4", "POST", 201)
    odd = Answer("POST#5", "POST", 409, "weird")
    html = Answer("POST#6", "POST", 500, json=False, escaped="ClientError: boom")
    texts = [p.detail for p in answer_problems([applied, maybe, unknown, hollow, odd], DOCUMENTED)]
    assert texts == [
        "POST#1 503 throttled: a definite failure, yet its commit was applied",
        "POST#2 503 throttled: a definite failure after a commit attempt that may have "
        "applied (only 201/200/202 may follow one)",
        "POST#4 201: success, yet no pledge is recorded",
        "POST#5 409 weird: 'weird' is not a documented error code",
    ]
    assert [p.invariant for p in answer_problems([html], DOCUMENTED)] == ["0 no exception escapes"]


def test_an_unrecorded_intent_needs_a_refusal_or_exactly_one_open_case():
    """202 then nothing: lost without a case, and lost again with two; a claim out of the
    stuck index needs its case, and a COMPLETED claim its pledge."""
    intent = "explorer#k"
    told = [Answer("POST#1", "POST", 202, "outcome_unknown")]
    case = {"case_id": "C-1", "intent_id": intent, "state": "OPEN", "case_type": "X"}
    assert len(lost_problems(_snapshot(cases=[]), intent, told)) == 1
    assert lost_problems(_snapshot(cases=[case]), intent, told) == []
    two = [case, {**case, "case_id": "C-2"}]
    assert len(lost_problems(_snapshot(cases=two), intent, told)) == 1
    refused = [Answer("POST#1", "POST", 503, "throttled")]
    assert lost_problems(_snapshot(), intent, refused) == []
    claims = [
        {"pk": "a", "status": "PENDING", "version": 1, "case_id": "C-9"},
        {"pk": "b", "status": "COMPLETED", "version": 2, "intent_id": intent},
    ]
    details = [p.detail for p in lost_problems(_snapshot(idempotency_keys=claims), intent, refused)]
    assert details == [
        "claim v1 left the pending index while PENDING without an existing case (case_id 'C-9')",
        "claim v2 is COMPLETED without its pledge",
    ]


def test_a_voided_pledge_was_recorded_and_is_not_lost():
    """A pledge recorded, acknowledged and then voided by an approved override (the
    explorer's approve-void hand): the intent was recorded, its claim's pledge exists, and
    no case need follow it; nothing is lost (a RECORDED-only check called it lost)."""
    intent = "explorer#k"
    told = [Answer("POST#1", "POST", 202, "outcome_unknown")]
    voided = {"intent_id": intent, "status": "VOIDED"}
    claim = {"pk": "a", "status": "COMPLETED", "version": 2, "intent_id": intent}
    snapshot = _snapshot(pledges=[voided], idempotency_keys=[claim], cases=[])
    assert lost_problems(snapshot, intent, told) == []
    assert unrecorded_problems(snapshot, intent, [("C-1", "AMBIGUOUS_TIMEOUT")]) == []
    gone = _snapshot(pledges=[], idempotency_keys=[claim], cases=[])
    assert len(lost_problems(gone, intent, told)) == 2  # the check still sees a loss


def test_one_case_id_for_two_problems_and_a_drifting_ledger_are_violations():
    """A case id attempted for two problems (types asking one question, "did it commit?",
    share theirs); a ledger that disagrees with its pledges."""
    opens = [
        ("C-1", "TOKEN_MISMATCH"),
        ("C-1", "STUCK_PENDING"),
        ("C-2", "STUCK_PENDING"),
        ("C-2", "AMBIGUOUS_TIMEOUT"),
    ]
    assert [p.detail for p in case_type_problems(opens)] == [
        "case C-1 was opened as TOKEN_MISMATCH and did_it_commit"
    ]
    pledge = {
        "intent_id": "explorer#k",
        "fund": "GENERAL",
        "currency": "USD",
        "amount": "25.00",
        "status": "RECORDED",
    }
    ledger = {"fund": "GENERAL#USD#0", "fund_code": "GENERAL", "currency": "USD"}
    snapshot = _snapshot(
        pledges=[pledge], ledger=[{**ledger, "pledged_total": 50, "pledge_count": 2}]
    )
    assert len(ledger_problems(snapshot)) == 3  # no receipt, amount and count
    snapshot = _snapshot(
        pledges=[{**pledge, "status": "VOIDED"}],
        ledger=[{**ledger, "pledged_total": 0, "pledge_count": 0}],
        audit_events=[],
    )
    assert [p for p in ledger_problems(snapshot) if "ledger" in p.detail] == []


# --- whole runs ---------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(600)
def test_depth_one_finds_no_violation(dynamodb_local, settings, capsys):
    """Every fault kind at every call of the fault-free life, in two worker processes:
    the matrix is printed, the last line counts the scenarios, and none violates."""
    settings.DYNAMODB_ENDPOINT_URL = dynamodb_local.endpoint_url
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.suppress(SystemExit):
        call_command("explore_faults", "--workers", "2", stdout=out)
    lines = out.getvalue().splitlines()
    with capsys.disabled():
        print(f"\nexplore_faults depth 1: {lines[-1]} in {time.monotonic() - started:.0f} s")
    scenarios = int(lines[-1].split()[1])
    repros = [line for line in lines if line.startswith("explore_faults --only")]
    assert lines[-1] == f"explore_faults: {scenarios} scenarios, 0 violations", "\n".join(repros)
    assert scenarios > 50
    assert any(line.startswith("POST#1 commit#1 ") for line in lines)


@pytest.mark.dynamodb_local_only
@pytest.mark.django_db
def test_a_fence_broken_on_purpose_is_reported(dynamodb_local, monkeypatch):
    """With the outcome rule's fence removed — an unknown commit outcome answered as a
    definite 503 — the explorer reports the lost-then-throttled commit as a lie, with a
    line that replays it."""
    from reconciliation.claims import intake

    real_commit = intake.pledge_commit

    def unfenced(*args, **kwargs):
        outcome = real_commit(*args, **kwargs)
        if outcome.kind == OutcomeKind.OUTCOME_UNKNOWN:
            return IntakeOutcome(OutcomeKind.THROTTLED, retry_after=1)
        return outcome

    monkeypatch.setattr(intake, "pledge_commit", unfenced)
    only = "POST#1 commit#1:*"
    config = ExploreConfig(only=only, workers=0, endpoint_url=dynamodb_local.endpoint_url)
    exploration = explore(config)
    lines = exploration.lines()
    assert exploration.violations, "\n".join(lines)
    assert "explore_faults --only 'POST#1 commit#1:lost_then_throttle'  ✗ 2 truthful" in (
        "\n".join(lines)
    )
    assert lines[-1] == (
        f"explore_faults: {len(exploration.results)} scenarios, "
        f"{len(exploration.violations)} violations"
    )


def _unconditioned(update: dict) -> dict:
    """``update`` without its condition (and the values and names only it used)."""
    update = {k: v for k, v in update.items() if not k.startswith(("Condition", "ReturnValuesOn"))}
    used = update["UpdateExpression"]
    for field in ("ExpressionAttributeValues", "ExpressionAttributeNames"):
        kept = {k: v for k, v in update.get(field, {}).items() if re.search(f"{k}\\b", used)}
        update[field] = kept
    return update


@pytest.mark.dynamodb_local_only
@pytest.mark.django_db
def test_a_claim_fence_dropped_on_purpose_is_reported(dynamodb_local, monkeypatch):
    """The commit's claim Update without its version fence: the outcome of a lone life
    does not change, but the explorer reports the unfenced write, on the fault-free life
    already, with a line that replays it."""
    real = ClaimRepository.complete_item

    def unfenced(self, *args, **kwargs):
        return {"Update": _unconditioned(real(self, *args, **kwargs)["Update"])}

    monkeypatch.setattr(ClaimRepository, "complete_item", unfenced)
    config = ExploreConfig(only="fault-free", workers=0, endpoint_url=dynamodb_local.endpoint_url)
    exploration = explore(config)
    lines = exploration.lines()
    assert [r.scenario for r in exploration.violations] == ["fault-free"], "\n".join(lines)
    assert (
        "explore_faults --only 'fault-free'  ✗ 6 every write fenced: POST#1 commit#1: "
        "Update on idempotency_keys without version or attempt_id"
    ) in lines
    assert lines[-1] == "explore_faults: 1 scenarios, 1 violations"


def _violations(endpoint_url: str, only: str) -> list[str]:
    exploration = explore(ExploreConfig(only=only, workers=0, endpoint_url=endpoint_url))
    return [line for line in exploration.lines() if line.startswith("explore_faults --only")]


@pytest.mark.dynamodb_local_only
@pytest.mark.django_db
def test_a_claim_released_apart_from_its_case_is_reported(dynamodb_local, monkeypatch):
    """The cancelled commit's claim released on its own before its case is written (the
    old order): when the case write fails, the claim has left the stuck-claim index with
    no case, and the explorer says so for that very request."""
    from reconciliation.claims import commit_outcomes

    real = commit_outcomes.open_case

    def release_first(repos, claim, case_type, *, claim_move=None, **kwargs):
        if claim_move is not None:
            commit_outcomes.apply_quietly(repos, claim_move(f"released-{claim.version}"))
        return real(repos, claim, case_type, **kwargs)

    monkeypatch.setattr(commit_outcomes, "open_case", release_first)
    lines = _violations(
        dynamodb_local.endpoint_url, "POST#1 commit#1:conflict+POST#1 case open#1:validation"
    )
    assert any("left the stuck-claim index without its case" in line for line in lines), lines


@pytest.mark.dynamodb_local_only
@pytest.mark.django_db
def test_a_reclaim_that_forgets_its_attempt_is_reported(dynamodb_local, monkeypatch):
    """A re-claim that mints an attempt id of its own (the old way): when its response is
    lost, the request no longer knows the claim is its own and answers 409 about it."""
    real = ClaimRepository.reclaim

    def forgetful(self, seen, *, attempt):
        return real(self, seen, attempt=dataclasses.replace(attempt, attempt_id=str(uuid.uuid4())))

    monkeypatch.setattr(ClaimRepository, "reclaim", forgetful)
    lines = _violations(
        dynamodb_local.endpoint_url,
        "POST#1 claim put#1:lost_then_throttle+POST#3 re-claim#1:timeout_after",
    )
    assert any("this very request holds" in line for line in lines), lines


@pytest.mark.dynamodb_local_only
@pytest.mark.django_db
def test_a_late_worker_merging_two_problems_into_one_case_is_reported(dynamodb_local, monkeypatch):
    """Re-claims that keep the previous token and case ids blind to the case type (the old
    way): a worker stalled past its lease comes back, meets a token mismatch, and its case
    merges into the sweep's STUCK_PENDING case; the explorer names the shared case id."""
    from reconciliation.cases import models as case_repository
    from reconciliation.claims import opening as case_service

    real_reclaim = ClaimRepository.reclaim

    def same_token(self, seen, *, attempt):
        kept = dataclasses.replace(
            attempt, request_token=seen.request_token, token_issued_at=seen.token_issued_at
        )
        return real_reclaim(self, seen, attempt=kept)

    real_id = case_repository.case_id_for
    monkeypatch.setattr(ClaimRepository, "reclaim", same_token)
    monkeypatch.setattr(
        case_service, "case_id_for", lambda pk, v, _type, tag="": real_id(pk, v, "-", tag)
    )
    lines = _violations(dynamodb_local.endpoint_url, "POST#1 claim put#1:stall_after")
    assert any("was opened as TOKEN_MISMATCH and did_it_commit" in line for line in lines), lines
