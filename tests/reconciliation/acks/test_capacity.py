"""What acknowledgements cost in write units, measured on DynamoDB Local (which reports
index units): at most +4 per typical pledge, the outbox entry and the record that settles
it, the budget the capacity plan is sized by (docs/capacity.md)."""

from __future__ import annotations

import pytest

from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult, Endpoint, secret_new
from reconciliation.acks.shard_lease import ShardLeases
from reconciliation.dynamo import capacity
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM
from tests.reconciliation.acks.conftest import same_shard_keys

pytestmark = [pytest.mark.django_db, pytest.mark.dynamodb_local_only]

ENDPOINT = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())


def dispatch(leases: ShardLeases, answer: int = 200):
    return acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [ENDPOINT],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=lambda target, **kwargs: AttemptResult(answer),
        leases=leases,
        # In this thread: capacity.measuring counts the calls of the thread it runs in.
        workers=0,
    )


def test_a_pledge_delivered_first_time_costs_four_write_units(ddb, api):
    """A dispatcher already holding its shard's lease (taken for an earlier pledge): the
    next pledge's acknowledgement costs its commit's ``acks_due`` entry 2 (1 ×2 in the
    transaction) and one record of the delivery 1 that takes it out of the index 1: +4."""
    first, second = same_shard_keys(2)
    leases = ShardLeases(AS_SYSTEM.store, owner="dispatcher-a")
    assert api.post(first, pledge_body()).status_code == 201
    assert dispatch(leases).delivered == 1  # the shard's lease is taken here, and held

    with capacity.instrumented(), capacity.measuring() as committed:
        assert api.post(second, pledge_body()).status_code == 201
    with capacity.instrumented(), capacity.measuring() as delivered:
        report = dispatch(leases)
    assert (report.delivered, report.settled) == (1, 1)
    # claim 2 (put 1, pending index 1) + commit 20 (14 before acknowledgements, 2 for the
    # pledge's by_donor_key entry, 2 for its acks_due entry, 2 for the request log's entry
    # written in the transaction); on indexes: pending 1, commit 10 (by_day ×2, pending
    # out, by_donor_key, acks_due).
    assert (committed.write, committed.index_write) == (2 + 20, 1 + 10)
    # The delivery: one UpdateItem of the pledge (1) that leaves acks_due (1); no lease.
    assert (delivered.write, delivered.index_write) == (2, 1)


def test_the_shard_lease_is_one_write_a_pass_and_a_retry_three(ddb, api):
    """A dispatcher's first pass over a shard with two pledges due takes the shard's lease
    (1) and records each (2 each); a failed attempt on a held lease is its record (1) and
    the due time moving inside ``acks_due`` (2: the entry's key changes)."""
    first, second, third = same_shard_keys(3)
    for key in (first, second):
        assert api.post(key, pledge_body()).status_code == 201
    leases = ShardLeases(AS_SYSTEM.store, owner="dispatcher-a")
    with capacity.instrumented(), capacity.measuring() as pass_spent:
        assert dispatch(leases).delivered == 2
    assert (pass_spent.write, pass_spent.index_write) == (1 + 2 * 2, 2)

    assert api.post(third, pledge_body()).status_code == 201
    with capacity.instrumented(), capacity.measuring() as retry_spent:
        assert dispatch(leases, answer=500).failed == 1
    assert (retry_spent.write, retry_spent.index_write) == (3, 2)
