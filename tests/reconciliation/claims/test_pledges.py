"""The write path under races, retries, lost responses and fencing (service layer + API)."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from functools import partial

import pytest
from botocore.exceptions import ClientError
from django.test import Client

from reconciliation import clock, metrics
from reconciliation.actors import Actor, Role
from reconciliation.claims import intake
from reconciliation.claims.models import ClaimStatus, pledge_home
from reconciliation.claims.outcomes import IntakeOutcome, OutcomeKind
from reconciliation.claims.repository import ClaimTaken, Finalisation
from reconciliation.claims.request import PledgeRequest, parse_fields
from reconciliation.dynamo.cancellation import cancellation_decode
from reconciliation.dynamo.retry import RetriesExhausted, with_retry
from reconciliation.simulation import faults
from tests import fault_helpers
from tests.conftest import pledge_body
from tests.fault_helpers import response_lost
from tests.helpers import (
    AS_SYSTEM,
    audit_events,
    cases,
    claims,
    ledger_total,
    race,
    repositories,
    scan_all,
)
from tests.helpers import pledges as all_pledges

ACTOR = Actor(username="api:acme", role=Role.API, address="127.0.0.1")


def _request(**overrides) -> PledgeRequest:
    return parse_fields(pledge_body(**overrides))


def _submit(key: str, **overrides) -> IntakeOutcome:
    return intake.pledge_submit(
        pledge_home("acme", key),
        tenant="acme",
        idempotency_key=key,
        request=_request(**overrides),
        actor=ACTOR,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.dynamodb_local_only  # moto's in-process backend is not thread-safe
def test_32_threads_same_key_and_body_record_one_pledge(ddb, settings):
    """32 threads at a barrier post the same key and body through the API, 20 rounds: exactly
    one pledge and one ledger increment per round; every answer 201, 200-replay or 409.
    (640 requests in a few seconds: the tenant's intake rate limit, 100 a second after a
    burst of 200, is lifted here; a quick run met it and answered 429.)"""
    from dashboard.tenancy.models import ApiToken

    settings.INTAKE_RATE_PER_S = 1_000_000
    settings.INTAKE_BURST = 1_000_000

    _, token = ApiToken.issue("acme")
    statuses: dict[int, int] = {}
    for round_no in range(20):

        def post(client: Client, key: str = f"race-{round_no}") -> int:
            return client.post(
                "/api/v1/pledges",
                data=json.dumps(pledge_body()),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
                HTTP_IDEMPOTENCY_KEY=key,
            ).status_code

        outcomes = race(*(partial(post, Client()) for _ in range(32)))
        answers = [outcome for outcome in outcomes if isinstance(outcome, int)]
        assert len(answers) == 32, outcomes
        assert set(answers) <= {201, 200, 409}, answers
        assert answers.count(201) == 1, answers
        for status in answers:
            statuses[status] = statuses.get(status, 0) + 1
    assert len(all_pledges(ddb)) == 20
    assert ledger_total(ddb) == (Decimal("25.00") * 20, 20)
    assert statuses[201] == 20


@pytest.mark.token_semantics
def test_retry_after_ambiguous_commit_with_stored_token_applies_once(ddb):
    """ambiguous-after-commit, then the same commit re-sent under the stored token: one
    pledge, one ledger increment (DynamoDB answers the replay without applying it)."""
    with fault_helpers.injected({"ambiguous_after_commit": 1.0}):
        outcome = _submit("amb-1")
    assert outcome.kind == OutcomeKind.OUTCOME_UNKNOWN
    repos = repositories()
    claim_item = claims(ddb)[0]
    # Rebuild the attempt exactly as it was when the commit was sent (version 1).
    claim = repos.claims.get("acme#create_pledge#amb-1")
    attempt = claim.__class__(**{**claim.__dict__, "status": "PENDING", "version": 1})
    retried = intake.pledge_commit(repos, attempt)
    assert retried.kind == OutcomeKind.CREATED
    assert len(all_pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert claim_item["request_token"] == attempt.request_token


@pytest.mark.token_semantics
def test_a_commit_rebuilt_minutes_later_under_its_token_carries_the_same_log_entry(ddb):
    """An ambiguous commit that applied, rebuilt from its claim four minutes later (as a
    RETRY_COMMIT in another process does) and sent under the same token: its request log
    entry has no time or id of the resend in it, so the transaction is the same one
    (no IdempotentParameterMismatch): DynamoDB answers it without applying it again, and
    one pledge and one log entry, the commit's, exist."""
    with fault_helpers.injected({"ambiguous_after_commit": 1.0}):
        outcome = _submit("amb-log")
    assert outcome.kind == OutcomeKind.OUTCOME_UNKNOWN
    repos = repositories()
    claim = repos.claims.get("acme#create_pledge#amb-log")
    attempt = claim.__class__(**{**claim.__dict__, "status": "PENDING", "version": 1})
    sent_then, _ = intake.commit_items(repos, attempt)
    with clock.travel(240):
        assert intake.commit_items(repos, attempt)[0] == sent_then
        retried = intake.pledge_commit(repos, attempt)
    assert retried.kind == OutcomeKind.CREATED  # a changed item: token_parameter_mismatch
    assert len(all_pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    [logged] = scan_all(ddb, ddb.tables.requests)
    assert logged["outcome"] == "created" and logged["at"] == attempt.claimed_at


@pytest.mark.token_semantics
def test_a_lost_commit_response_resent_by_the_sdk_logs_one_entry(ddb, api):
    """The commit applies but its response is lost; the SDK sends the same request again
    under the same token, which DynamoDB answers as the transaction it already applied:
    201, one pledge, one request log entry."""
    with response_lost(AS_SYSTEM.store.client, "TransactWriteItems") as swallowed:
        created = api.post("lost-commit", pledge_body())
    assert swallowed == [200]
    assert created.status_code == 201
    assert len(all_pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert [i["outcome"] for i in scan_all(ddb, ddb.tables.requests)] == ["created"]


def test_changed_amount_under_same_key_is_rejected_with_nothing_written(ddb):
    """A retry of a committed key with a changed amount is key reuse: nothing is written."""
    assert _submit("chg-1").kind == OutcomeKind.CREATED
    before = (all_pledges(ddb), claims(ddb), audit_events(ddb))
    assert _submit("chg-1", amount="99.00").kind == OutcomeKind.KEY_REUSED
    assert (all_pledges(ddb), claims(ddb), audit_events(ddb)) == before


def test_fencing_a_late_worker_cannot_complete_or_fail_its_successors_claim(ddb):
    """A claims, its lease expires, B re-claims and completes; A's late completion and A's
    late failure both fail their conditions and B's record is intact."""
    with fault_helpers.injected({"crash_after_claim": 1.0}), pytest.raises(faults.SimulatedCrash):
        _submit("fence-1")
    repos = repositories()
    worker_a = repos.claims.get("acme#create_pledge#fence-1")
    with clock.travel(61):
        assert _submit("fence-1").kind == OutcomeKind.CREATED  # worker B
    b_record = claims(ddb)[0]
    assert b_record["status"] == "COMPLETED" and b_record["attempt_id"] != worker_a.attempt_id

    late = intake.pledge_commit(repos, worker_a)
    # B's re-claim minted its own token, so on every engine A's late transaction is
    # judged by its conditions alone: the pledge exists with the same body, A's claim
    # fence fails, and A's caller hears B's answer.
    assert late.kind == OutcomeKind.REPLAYED
    assert b_record["request_token"] != worker_a.request_token
    with pytest.raises(ClaimTaken) as info:
        repos.claims.finalise(
            worker_a, Finalisation(status=ClaimStatus.FAILED, error_code="late", expires_in_s=30)
        )
    assert info.value.current.status == "COMPLETED"
    assert claims(ddb)[0] == b_record
    assert len(all_pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)


@pytest.mark.dynamodb_local_only
def test_throttling_is_retried_with_backoff_until_it_commits(ddb):
    """Half the calls throttled (fixed seed): the write path retries with backoff and commits
    once; the application-level retry counter moved."""
    before = metrics.APP_RETRIES.labels("ThrottlingException")._value.get()
    with fault_helpers.injected(faults.FaultPlan({"throttle": 0.5}, rng=random.Random(7))):
        outcome = _submit("thr-1")
    assert outcome.kind == OutcomeKind.CREATED
    assert len(all_pledges(ddb)) == 1
    assert metrics.APP_RETRIES.labels("ThrottlingException")._value.get() > before


def test_conditional_check_failed_is_never_retried(settings):
    """with_retry gives a ConditionalCheckFailedException straight back after one call, and
    retries only transient codes, under its attempt budget."""
    calls = []

    def conditional():
        calls.append(1)
        raise ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "PutItem")

    with pytest.raises(ClientError):
        with_retry(conditional, sleep=lambda s: None)
    assert len(calls) == 1

    delays: list[float] = []

    def throttled():
        calls.append(1)
        raise ClientError({"Error": {"Code": "ThrottlingException"}}, "PutItem")

    calls.clear()
    with pytest.raises(RetriesExhausted):
        with_retry(throttled, attempts=4, budget_s=60, sleep=delays.append, rng=random.Random(1))
    assert len(calls) == 4
    assert len(delays) == 3
    caps = [
        min(settings.DDB_APP_RETRY_CAP_S, settings.DDB_APP_RETRY_BASE_S * 2**i) for i in range(3)
    ]
    assert all(0 <= d <= cap for d, cap in zip(delays, caps, strict=True))


@pytest.mark.dynamodb_local_only
def test_lost_response_on_claim_still_commits_exactly_one_pledge(ddb):
    """The claim PutItem takes effect but its response is lost; the SDK re-sends it, the
    condition fails on our own attempt_id, and the request commits exactly one pledge."""
    with response_lost(ddb.client, "PutItem") as swallowed:
        outcome = _submit("lost-1")
    assert swallowed == [200]
    assert outcome.kind == OutcomeKind.CREATED
    assert len(all_pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert cases(ddb) == []


def _cancelled_rows(ddb, items):
    with pytest.raises(ClientError) as info:
        ddb.client.transact_write_items(TransactItems=items)
    return [
        r.to_json() for r in cancellation_decode(items, info.value.response, repositories().roles())
    ]


def test_decoded_rows_for_pledge_exists_failure(ddb):
    """The commit of an intent whose pledge already exists decodes to: duplicate on the
    pledge (with the old item), nothing on the other three items."""
    with fault_helpers.injected({"crash_after_claim": 1.0}), pytest.raises(faults.SimulatedCrash):
        _submit("dup-1")
    repos = repositories()
    claim = repos.claims.get("acme#create_pledge#dup-1")
    items, pledge = intake.commit_items(repos, claim)
    ddb.client.put_item(TableName=ddb.tables.pledges, Item=items[0]["Put"]["Item"])
    rows = _cancelled_rows(ddb, items)
    assert rows == [
        {
            "index": 0,
            "operation": "Put",
            "table": "pledges",
            "key": {"intent_id": "acme#dup-1"},
            "code": "ConditionalCheckFailed",
            "message": "The conditional request failed",
            "old_item": json.loads(json.dumps(rows[0]["old_item"])),
            "attempted": rows[0]["attempted"],
            "explanation": "The pledge for this intent already exists (the durable record): "
            "this write is a duplicate and must not be applied again.",
            "branch": "duplicate",
        },
        {
            "index": 1,
            "operation": "Update",
            "table": "ledger",
            "key": {"fund": pledge.ledger_key},
            "code": "None",
            "message": "",
            "old_item": None,
            "attempted": {"update": items[1]["Update"]["UpdateExpression"]},
            "explanation": "This item was fine; the transaction was cancelled because of "
            "another item.",
            "branch": "none",
        },
        {
            "index": 2,
            "operation": "Put",
            "table": "audit_events",
            "key": {"stream": "PLEDGE#acme#dup-1", "seq": 1},
            "code": "None",
            "message": "",
            "old_item": None,
            "attempted": rows[2]["attempted"],
            "explanation": "This item was fine; the transaction was cancelled because of "
            "another item.",
            "branch": "none",
        },
        {
            "index": 3,
            "operation": "Update",
            "table": "idempotency_keys",
            "key": {"pk": "acme#create_pledge#dup-1"},
            "code": "None",
            "message": "",
            "old_item": None,
            "attempted": {"update": items[3]["Update"]["UpdateExpression"]},
            "explanation": "This item was fine; the transaction was cancelled because of "
            "another item.",
            "branch": "none",
        },
        {
            "index": 4,
            "operation": "Put",
            "table": "requests",
            "key": {"subject": "KEY#acme#dup-1"},
            "code": "None",
            "message": "",
            "old_item": None,
            "attempted": None,  # the log entry restates the request: no evidence
            "explanation": "This item was fine; the transaction was cancelled because of "
            "another item.",
            "branch": "none",
        },
    ]
    assert rows[0]["old_item"]["intent_id"] == "acme#dup-1"
    assert rows[0]["old_item"]["amount"] == 25
    assert rows[0]["attempted"]["intent_id"] == "acme#dup-1"
    assert rows[2]["attempted"]["action"] == "pledge_recorded"


def test_decoded_rows_for_lost_claim_failure(ddb):
    """A late worker's commit after a successor re-claimed decodes to a lost claim on the
    claim item (its old item showing the successor's version), nothing elsewhere."""
    with fault_helpers.injected({"crash_after_claim": 1.0}):
        with pytest.raises(faults.SimulatedCrash):
            _submit("lost-claim-1")
        repos = repositories()
        worker_a = repos.claims.get("acme#create_pledge#lost-claim-1")
        with clock.travel(61), pytest.raises(faults.SimulatedCrash):
            _submit("lost-claim-1")  # worker B re-claims, then dies too
    items, _ = intake.commit_items(repos, worker_a)
    rows = _cancelled_rows(ddb, items)
    assert [(r["index"], r["operation"], r["table"], r["code"], r["branch"]) for r in rows] == [
        (0, "Put", "pledges", "None", "none"),
        (1, "Update", "ledger", "None", "none"),
        (2, "Put", "audit_events", "None", "none"),
        (3, "Update", "idempotency_keys", "ConditionalCheckFailed", "lost_claim"),
        (4, "Put", "requests", "None", "none"),
    ]
    old = rows[3]["old_item"]
    assert old["status"] == "PENDING" and old["version"] == 2
    # The successor is a new attempt with a token of its own.
    assert old["attempt_id"] != worker_a.attempt_id
    assert old["request_token"] != worker_a.request_token
    assert rows[3]["explanation"] == (
        "The claim is no longer held by this attempt: it expired and another request "
        "re-claimed or finished it. It is now PENDING at version 2. This attempt must not "
        "complete, fail or delete it."
    )
    assert rows[3]["message"] == "The conditional request failed"
    assert rows[3]["key"] == {"pk": "acme#create_pledge#lost-claim-1"}


def test_ttl_deleted_claim_replays_from_the_durable_pledge(ddb):
    """The claim item is gone (TTL) but the pledge exists: a retry does not write again,
    answers 200 from the durable record and counts dynamo_ttl_delete_before_retry_total."""
    assert _submit("ttl-1").kind == OutcomeKind.CREATED
    ddb.client.delete_item(
        TableName=ddb.tables.idempotency_keys, Key={"pk": {"S": "acme#create_pledge#ttl-1"}}
    )
    before = metrics.TTL_DELETE_BEFORE_RETRY._value.get()
    outcome = _submit("ttl-1")
    assert outcome.kind == OutcomeKind.REPLAYED
    assert outcome.pledge["amount"] == "25.00"
    assert metrics.TTL_DELETE_BEFORE_RETRY._value.get() == before + 1
    assert len(all_pledges(ddb)) == 1
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert claims(ddb)[0]["status"] == "COMPLETED"


def test_expired_completed_claim_is_answered_from_the_durable_record(ddb):
    """A COMPLETED claim past its expiry (TTL not yet run) is not trusted: the replay
    comes from a consistent read of the pledge."""
    assert _submit("old-1").kind == OutcomeKind.CREATED
    with clock.travel(8 * 24 * 3600):
        outcome = _submit("old-1")
    assert outcome.kind == OutcomeKind.REPLAYED
    assert outcome.pledge["intent_id"] == "old-1"
    assert len(all_pledges(ddb)) == 1
