"""Failed conditional writes: DynamoDB bills them and reports no capacity for them, so
they are counted by kind, in /metrics and in the capacity sink, with the units the
documented rule bills (reconciliation/dynamo/failed_writes.py)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo import capacity, failed_writes
from reconciliation.dynamo.failed_writes import failed_write
from reconciliation.dynamo.item_size import item_size, write_units
from tests.helpers import claims
from tests.reconciliation.factories import key_reuse_case, submit

pytestmark = pytest.mark.django_db(databases=[])

CLAIMS_TABLE = "pledges-test-idempotency_keys"


def counted(kind: str) -> tuple[float, float]:
    labels = {"kind": kind}
    return (
        REGISTRY.get_sample_value("dynamo_failed_conditional_writes_total", labels) or 0.0,
        REGISTRY.get_sample_value("dynamo_failed_conditional_write_units_total", labels) or 0.0,
    )


def big_item(size: int) -> dict:
    item = {"pk": {"S": "k"}, "blob": {"S": ""}}
    item["blob"]["S"] = "x" * (size - item_size(item))
    assert item_size(item) == size
    return item


def test_a_failed_put_is_billed_at_the_existing_items_size_and_at_least_one_unit():
    failed = {"Error": {"Code": "ConditionalCheckFailedException"}, "Item": big_item(2_500)}
    params = {"TableName": CLAIMS_TABLE}

    assert failed_write("PutItem", params, failed).units == 3
    assert failed_write("PutItem", params, failed).kind == "put:idempotency_keys"
    no_item = {"Error": {"Code": "ConditionalCheckFailedException"}}
    assert failed_write("UpdateItem", {"TableName": "x-cases"}, no_item).units == 1
    assert failed_write("UpdateItem", {"TableName": "x-cases"}, no_item).kind == "update:cases"


def test_only_a_failed_condition_counts_not_a_throttle_or_a_conflict():
    throttled = {"Error": {"Code": "ThrottlingException"}}
    assert failed_write("PutItem", {"TableName": CLAIMS_TABLE}, throttled) is None
    conflict = {
        "Error": {"Code": "TransactionCanceledException"},
        "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}],
    }
    actions = [{"Put": {"TableName": "p-pledges", "Item": big_item(100)}}] * 2
    assert failed_write("TransactWriteItems", {"TransactItems": actions}, conflict) is None


def test_a_cancelled_transaction_is_budgeted_as_if_it_had_committed():
    actions = [
        {"Put": {"TableName": "p-pledges", "Item": big_item(300)}},
        {"Update": {"TableName": "p-ledger", "Key": {"fund": {"S": "G"}}}},
        {"Put": {"TableName": "p-audit_events", "Item": big_item(1_500)}},
    ]
    cancelled = {
        "Error": {"Code": "TransactionCanceledException"},
        "CancellationReasons": [
            {"Code": "ConditionalCheckFailed", "Item": big_item(300)},
            {"Code": "None"},
            {"Code": "None"},
        ],
    }

    failed = failed_write("TransactWriteItems", {"TransactItems": actions}, cancelled)

    # 2 × (1 + 1 for the update whose item did not come back + 2) = 8
    assert (failed.kind, failed.units) == ("transaction:pledges", 8)


def test_a_cancelled_put_is_estimated_on_the_larger_of_its_item_and_the_existing_one():
    actions = [{"Put": {"TableName": "p-pledges", "Item": big_item(100)}}]
    cancelled = {
        "Error": {"Code": "TransactionCanceledException"},
        "CancellationReasons": [{"Code": "ConditionalCheckFailed", "Item": big_item(2_100)}],
    }

    assert failed_write("TransactWriteItems", {"TransactItems": actions}, cancelled).units == 6


@pytest.mark.parametrize(
    ("operation", "params", "parsed"),
    [
        ("PutItem", {}, {"Error": {"Code": "ConditionalCheckFailedException"}}),
        (
            "TransactWriteItems",
            {"TransactItems": []},
            {
                "Error": {"Code": "TransactionCanceledException"},
                "CancellationReasons": [{"Code": "ConditionalCheckFailed"}],
            },
        ),
        (
            "TransactWriteItems",
            {"TransactItems": [{"Put": {}, "Update": {}}]},
            {
                "Error": {"Code": "TransactionCanceledException"},
                "CancellationReasons": [None, {"Code": "ConditionalCheckFailed"}],
            },
        ),
        (
            "PutItem",
            {"TableName": CLAIMS_TABLE},
            {"Error": {"Code": "ConditionalCheckFailedException"}, "Item": {"a": {"Q": 1}}},
        ),
    ],
)
def test_an_answer_the_hooks_cannot_read_is_uncounted_never_an_error(operation, params, parsed):
    """The hooks run inside every DynamoDB call: an exception there would replace the
    call's own answer (a replay's ConditionalCheckFailedException) with a KeyError."""

    class Model:
        name = operation

    before = counted("put:idempotency_keys")
    context = {"failed_writes_params": params}
    failed_writes._count(None, parsed, Model(), context=context)
    with capacity.measuring() as spent:
        capacity._record(None, parsed, Model(), context=context)

    assert counted("put:idempotency_keys")[0] - before[0] <= 1  # counted, or not, but no raise
    assert spent.requests == 1


@pytest.mark.dynamodb_local_only
def test_a_duplicate_claim_is_counted_in_metrics_and_the_capacity_sink(ddb):
    assert submit("fcw-1").kind == OutcomeKind.CREATED
    [claim] = [c for c in claims(ddb) if c["pk"].endswith("#fcw-1")]
    raw = ddb.client.get_item(
        TableName=ddb.tables.idempotency_keys, Key={"pk": {"S": claim["pk"]}}
    )["Item"]
    before = counted("put:idempotency_keys")

    with capacity.instrumented(), capacity.measuring() as spent:
        assert submit("fcw-1").kind == OutcomeKind.REPLAYED

    after = counted("put:idempotency_keys")
    units = write_units(item_size(raw))
    assert after == (before[0] + 1, before[1] + units)
    assert dict(spent.failed) == {"put:idempotency_keys": 1}
    assert dict(spent.failed_units) == {"put:idempotency_keys": units}
    assert spent.write == 0  # the engine reports nothing for it


@pytest.mark.dynamodb_local_only
def test_a_commit_refused_by_the_durable_pledge_key_is_a_failed_transaction(ddb):
    before = counted("transaction:pledges")

    key_reuse_case(ddb, "fcw-2")

    after = counted("transaction:pledges")
    # The commit's five actions at 2×: pledge, ledger, receipt, request log entry (items
    # it names, each under 1 KB) and the claim update (1 unit, its item did not come back).
    assert after == (before[0] + 1, before[1] + 10)


@pytest.mark.dynamodb_local_only
def test_a_commit_whose_answer_is_lost_is_still_measured(ddb):
    """``ambiguous_after_commit`` loses the answer of a commit that applied: the fault is
    raised after every other after-call handler, so the capacity sink and /metrics see
    the units the commit spent (they saw nothing before)."""
    from tests import fault_helpers

    # The faults first: the shared client they build is the one measured.
    lost = fault_helpers.injected({"ambiguous_after_commit": 1.0})
    with lost, capacity.instrumented(), capacity.measuring() as spent:
        assert submit("fcw-3").kind == OutcomeKind.OUTCOME_UNKNOWN

    # claim 2, the applied commit 20 (14 with its request log entry, 2 for each of the
    # pledge's by_day, acks_due and by_donor_key index entries: docs/capacity.md), then
    # the AMBIGUOUS_TIMEOUT case's transactions 26 (24, and 2 for the case's by_day entry)
    assert spent.write == 2 + 20 + 26
