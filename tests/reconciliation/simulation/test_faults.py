"""Fault injection: parsing, and honoured only in debug or with the explicit opt-in."""

from __future__ import annotations

from functools import partial

import pytest

from reconciliation.dynamo.client import regions
from reconciliation.simulation import faults
from reconciliation.simulation.fault_hooks import fault_injecting_client
from tests.helpers import race


def test_parse_accepts_names_and_aliases():
    """Full names and the simulator's short aliases parse to probabilities."""
    assert faults.parse_faults("ambiguous=0.03, throttle=0.05,crash=0.01") == {
        "ambiguous_after_commit": 0.03,
        "throttle": 0.05,
        "crash_after_claim": 0.01,
    }


@pytest.mark.parametrize(
    "spec,message",
    [
        ("explode=0.1", "unknown fault"),
        ("throttle=2", "between 0 and 1"),
        ("throttle=x", "not a number"),
    ],
)
def test_parse_rejects_bad_specs_clearly(spec, message):
    """Unknown names and bad probabilities are refused with a message naming the problem."""
    with pytest.raises(ValueError, match=message):
        faults.parse_faults(spec)


def test_fault_injection_is_ignored_without_debug_or_opt_in(settings, caplog):
    """FAULT_INJECTION set on a production configuration does nothing, and says so."""
    faults.set_plan(None)
    settings.FAULT_INJECTION = "crash_after_claim=1"
    settings.ALLOW_FAULT_INJECTION = False
    assert faults.active_plan() is None
    faults.PROCESS_FAULTS.crash_after_claim()  # does not raise
    assert "ignored" in caplog.text


def test_fault_injection_is_honoured_with_opt_in(settings):
    """With ALLOW_FAULT_INJECTION the plan is active and fires."""
    settings.FAULT_INJECTION = "crash_after_claim=1"
    settings.ALLOW_FAULT_INJECTION = True
    try:
        with pytest.raises(faults.SimulatedCrash):
            faults.PROCESS_FAULTS.crash_after_claim()
    finally:
        settings.FAULT_INJECTION = ""
        faults.active_plan()


def test_slow_task_sleeps_only_when_honoured(settings, monkeypatch):
    """``slow_task`` holds a task up only when fault injection is allowed and asks for it."""
    slept: list[float] = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    settings.FAULT_INJECTION = "slow_task=1"
    settings.ALLOW_FAULT_INJECTION = False
    faults.slow_task("retry_commit_task")
    assert slept == []
    settings.ALLOW_FAULT_INJECTION = True
    try:
        faults.slow_task("retry_commit_task")
    finally:
        settings.FAULT_INJECTION = ""
        faults.active_plan()
    assert slept == [faults.SLOW_TASK_S]


# --- The compound faults (docs/design.md §11), at the botocore level ---------------------------
#
# They answer at the HTTP layer (before-send), so they run where a real HTTP call is made:
# DynamoDB Local. moto's in-process stub would apply every request whatever they answer.
# Each runs on a client built for injecting faults, with a scope of its own.


@pytest.fixture
def faulty(ddb):
    """A fault-injecting client on the test's engine, and the scope its hooks consult."""
    scope = faults.FaultScope()
    return fault_injecting_client(regions()[0], scope), scope


def test_parse_accepts_the_compound_fault_names():
    """The four names of the second round parse like the others."""
    assert faults.parse_faults(
        "internal_error_after_commit=1,ambiguous_then_throttle=0.5,"
        "case_write_fails=0.25,access_denied=0"
    ) == {
        "internal_error_after_commit": 1.0,
        "ambiguous_then_throttle": 0.5,
        "case_write_fails": 0.25,
        "access_denied": 0.0,
    }
    for name in (
        "internal_error_after_commit",
        "ambiguous_then_throttle",
        "case_write_fails",
        "access_denied",
    ):
        assert name in faults.FAULT_NAMES
        assert f"``{name}``" in faults.__doc__


def test_a_commit_fault_keeps_its_token_and_draws_once():
    """Once a commit fault takes a token it answers every later send of that token without
    drawing again; concurrent sends of one token agree, and exactly one is the first."""
    plan = faults.FaultPlan({"internal_error_after_commit": 0.5})
    name = "internal_error_after_commit"
    taken_rounds = 0
    for round_ in range(30):
        token = f"tok-{round_}"
        results = race(*[partial(plan.take_commit, token)] * 8)
        assert set(results) <= {(None, False), (name, True), (name, False)}
        firsts = results.count((name, True))
        assert firsts <= 1
        if firsts:
            taken_rounds += 1
            assert plan.take_commit(token) == (name, False)
        else:
            assert (name, False) not in results
    # One draw fired per taken token, never one per retry.
    assert plan.counts.get(name, 0) == taken_rounds > 0
    plan.take_commit("")
    assert "" not in plan.commit_tokens  # no token, nothing kept


def _commit_items(ddb, intent: str, amount: str = "10") -> list[dict]:
    """A pledge commit's shape: a Put on the pledges table and a ledger Update."""
    return [
        {
            "Put": {
                "TableName": ddb.tables.pledges,
                "Item": {"intent_id": {"S": intent}, "amount": {"N": amount}},
                "ConditionExpression": "attribute_not_exists(intent_id)",
            }
        },
        {
            "Update": {
                "TableName": ddb.tables.ledger,
                "Key": {"fund": {"S": "F#USD#0"}},
                "UpdateExpression": "ADD pledged_total :a, pledge_count :one",
                "ExpressionAttributeValues": {":a": {"N": amount}, ":one": {"N": "1"}},
            }
        },
    ]


def _ledger(ddb) -> tuple[int, int]:
    item = ddb.client.get_item(
        TableName=ddb.tables.ledger, Key={"fund": {"S": "F#USD#0"}}, ConsistentRead=True
    ).get("Item", {})
    return int(item.get("pledged_total", {"N": "0"})["N"]), int(
        item.get("pledge_count", {"N": "0"})["N"]
    )


def _pledge(ddb, intent: str) -> dict | None:
    return ddb.client.get_item(
        TableName=ddb.tables.pledges, Key={"intent_id": {"S": intent}}, ConsistentRead=True
    ).get("Item")


def _sends(client, operation: str) -> list[str]:
    """Every HTTP attempt of ``operation`` (its token), the SDK's retries included."""
    import json

    seen: list[str] = []

    def handler(request, **_kwargs):
        seen.append(json.loads(request.body or b"{}").get("ClientRequestToken", ""))

    client.meta.events.register(f"before-send.dynamodb.{operation}", handler)
    return seen


def _error(excinfo) -> tuple[str, int]:
    response = excinfo.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.mark.dynamodb_local_only
def test_internal_error_after_commit_applies_then_answers_500_to_every_retry(ddb, faulty, settings):
    """The commit is applied on the engine, yet the caller gets HTTP 500 InternalServerError,
    on each of the SDK's attempts and again on an application retry with the same token;
    the engine saw it once (the ledger counts one pledge)."""
    from botocore.exceptions import ClientError

    client, scope = faulty
    with scope.injected({"internal_error_after_commit": 1.0}) as plan:
        sends = _sends(client, "TransactWriteItems")
        items = _commit_items(ddb, "acme#ie-1")
        with pytest.raises(ClientError) as first:
            client.transact_write_items(TransactItems=items, ClientRequestToken="tok-ie-1")
        assert _error(first) == ("InternalServerError", 500)
        # The SDK retried the 500 (standard mode), with the same token.
        assert sends == ["tok-ie-1"] * settings.DDB_MAX_ATTEMPTS
        assert _pledge(ddb, "acme#ie-1") is not None
        assert _ledger(ddb) == (10, 1)

        with pytest.raises(ClientError) as again:
            client.transact_write_items(TransactItems=items, ClientRequestToken="tok-ie-1")
        assert _error(again) == ("InternalServerError", 500)
        assert plan.counts == {"internal_error_after_commit": 1}  # drawn once for the token
        assert _ledger(ddb) == (10, 1)

        # Without the fault the engine answers the retry from its token: applied once, 200.
    ddb.client.transact_write_items(TransactItems=items, ClientRequestToken="tok-ie-1")
    assert _ledger(ddb) == (10, 1)


@pytest.mark.dynamodb_local_only
def test_internal_error_after_commit_leaves_other_transactions_alone(ddb, faulty):
    """Only pledge commits (a Put on the pledges table) are taken: a ledger-only
    transaction and single-item writes go through untouched."""
    client, scope = faulty
    with scope.injected({"internal_error_after_commit": 1.0}) as plan:
        client.transact_write_items(TransactItems=_commit_items(ddb, "x")[1:])
        client.put_item(TableName=ddb.tables.pledges, Item={"intent_id": {"S": "acme#plain"}})
    assert _ledger(ddb) == (10, 1)
    assert _pledge(ddb, "acme#plain") is not None
    assert plan.counts == {}


@pytest.mark.dynamodb_local_only
def test_ambiguous_then_throttle_applies_loses_the_answer_then_throttles(ddb, settings):
    """The first send applies and its response is lost (a connection error); every retry of
    the same token, the SDK's and the application's, is answered ThrottlingException."""
    from botocore.exceptions import ClientError, ConnectionClosedError

    # One attempt per call, so each send is seen by the caller on its own.
    settings.DDB_MAX_ATTEMPTS = 1
    scope = faults.FaultScope()
    client = fault_injecting_client(regions()[0], scope)
    with scope.injected({"ambiguous_then_throttle": 1.0}) as plan:
        items = _commit_items(ddb, "acme#at-1")
        with pytest.raises(ConnectionClosedError):
            client.transact_write_items(TransactItems=items, ClientRequestToken="tok-at-1")
        assert _pledge(ddb, "acme#at-1") is not None
        assert _ledger(ddb) == (10, 1)
        for _ in range(2):
            with pytest.raises(ClientError) as retry:
                client.transact_write_items(TransactItems=items, ClientRequestToken="tok-at-1")
            assert _error(retry) == ("ThrottlingException", 400)
        assert _ledger(ddb) == (10, 1)

        # With the SDK's own retries, the caller sees only the last answer: throttled.
        settings.DDB_MAX_ATTEMPTS = 3
        client = fault_injecting_client(regions()[0], scope)
        sends = _sends(client, "TransactWriteItems")
        with pytest.raises(ClientError) as hidden:
            client.transact_write_items(
                TransactItems=_commit_items(ddb, "acme#at-2", "5"), ClientRequestToken="tok-at-2"
            )
        assert _error(hidden) == ("ThrottlingException", 400)
        assert sends == ["tok-at-2"] * 3
        assert _pledge(ddb, "acme#at-2") is not None
        assert _ledger(ddb) == (15, 2)
        assert plan.counts == {"ambiguous_then_throttle": 2}


@pytest.mark.dynamodb_local_only
def test_case_write_fails_throttles_every_write_to_the_cases_table_only(ddb, faulty, settings):
    """PutItem, UpdateItem, DeleteItem, BatchWriteItem on the cases table and any
    transaction with an item on it are throttled and write nothing; reads of cases and
    writes elsewhere go through."""
    from botocore.exceptions import ClientError

    cases_table = ddb.tables.cases
    key = {"case_id": {"S": "C-1"}}
    ddb.client.put_item(TableName=cases_table, Item={**key, "state": {"S": "OPEN"}})
    client, scope = faulty
    with scope.injected({"case_write_fails": 1.0}) as plan:
        writes = [
            lambda: client.put_item(TableName=cases_table, Item={"case_id": {"S": "C-2"}}),
            lambda: client.update_item(
                TableName=cases_table,
                Key=key,
                UpdateExpression="SET #s = :s",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={":s": {"S": "RESOLVED"}},
            ),
            lambda: client.delete_item(TableName=cases_table, Key=key),
            lambda: client.batch_write_item(
                RequestItems={cases_table: [{"PutRequest": {"Item": {"case_id": {"S": "C-3"}}}}]}
            ),
            lambda: client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": cases_table, "Item": {"case_id": {"S": "C-4"}}}},
                    {
                        "Put": {
                            "TableName": ddb.tables.audit_events,
                            "Item": {"stream": {"S": "CASE#C-4"}, "seq": {"N": "1"}},
                        }
                    },
                ]
            ),
        ]
        for write in writes:
            with pytest.raises(ClientError) as refused:
                write()
            assert _error(refused) == ("ThrottlingException", 400)
        # Every attempt, the SDK's retries included, was throttled.
        assert plan.counts == {"case_write_fails": len(writes) * settings.DDB_MAX_ATTEMPTS}
        # Reads of the cases table, and writes elsewhere, are untouched.
        item = client.get_item(TableName=cases_table, Key=key, ConsistentRead=True)["Item"]
        assert item["state"] == {"S": "OPEN"}
        client.put_item(TableName=ddb.tables.pledges, Item={"intent_id": {"S": "p"}})
    # Nothing of the refused writes reached the engine.
    rows = ddb.client.scan(TableName=cases_table, ConsistentRead=True)["Items"]
    assert [r["case_id"]["S"] for r in rows] == ["C-1"]
    assert ddb.client.scan(TableName=ddb.tables.audit_events)["Items"] == []


@pytest.mark.dynamodb_local_only
def test_access_denied_answers_every_call_and_writes_nothing(ddb, faulty):
    """Every call, read or write, is answered AccessDeniedException (HTTP 400) and never
    reaches the engine."""
    from botocore.exceptions import ClientError

    client, scope = faulty
    with scope.injected({"access_denied": 1.0}):
        calls = [
            lambda: client.describe_table(TableName=ddb.tables.pledges),
            lambda: client.get_item(
                TableName=ddb.tables.pledges, Key={"intent_id": {"S": "x"}}, ConsistentRead=True
            ),
            lambda: client.put_item(TableName=ddb.tables.pledges, Item={"intent_id": {"S": "x"}}),
            lambda: client.transact_write_items(TransactItems=_commit_items(ddb, "acme#ad")),
        ]
        for call in calls:
            with pytest.raises(ClientError) as refused:
                call()
            assert _error(refused) == ("AccessDeniedException", 400)
    assert ddb.client.scan(TableName=ddb.tables.pledges)["Items"] == []
    assert _ledger(ddb) == (0, 0)


@pytest.mark.dynamodb_local_only
def test_compound_faults_at_probability_zero_change_nothing(ddb, faulty):
    """Named at probability 0, none of the four fires: a pledge commit and a case write
    go through."""
    client, scope = faulty
    spec = (
        "internal_error_after_commit=0,ambiguous_then_throttle=0,case_write_fails=0,access_denied=0"
    )
    with scope.injected(faults.parse_faults(spec)) as plan:
        client.transact_write_items(
            TransactItems=_commit_items(ddb, "acme#zero"), ClientRequestToken="tok-zero"
        )
        client.put_item(TableName=ddb.tables.cases, Item={"case_id": {"S": "C-0"}})
    assert _ledger(ddb) == (10, 1)
    assert plan.counts == {}
