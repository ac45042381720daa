"""One region map for every process: a key's home region and the tags in its
keys derive from region names, so two processes that list ``DDB_REGIONS`` in another
order still send one key to one region. Failed before: the home was the key's hash
modulo the list position and the first listed region was the untagged one, so each
process recorded the key in its own first region, both answered 201, and both wrote
the untagged ledger shard."""

from __future__ import annotations

import pytest
from django.test import override_settings

from reconciliation.claims.ledger import fund_total
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo.client import dynamodb_client, regions, reset_clients
from reconciliation.stores import every_store
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.dynamodb_local_only]

KEYS = [f"order-{n}" for n in range(8)]


def _listed_in_reverse(listing: str) -> str:
    return ",".join(reversed(listing.split(",")))


def test_two_processes_listing_the_regions_in_another_order_record_a_key_once(
    two_regions, settings
):
    """Process A lists ``us-east-1,eu-west-1``, process B ``eu-west-1,us-east-1``; each
    key is posted through A, then through B: B answers a replay, and each pledge, its
    receipt and its ledger addition are in one region only."""
    names = two_regions
    listings = (settings.DDB_REGIONS, _listed_in_reverse(settings.DDB_REGIONS))
    answers: dict[str, list[str]] = {key: [] for key in KEYS}
    for listing in listings:
        with override_settings(DDB_REGIONS=listing):
            reset_clients()
            for key in KEYS:
                answers[key].append(submit(key).kind)
    reset_clients()
    assert answers == {key: [OutcomeKind.CREATED, OutcomeKind.REPLAYED] for key in KEYS}
    holders = {}
    for key in KEYS:
        holders[key] = [
            r.name
            for r in regions()
            if "Item"
            in dynamodb_client(r).get_item(
                TableName=names.pledges,
                Key={"intent_id": {"S": f"acme#{key}"}},
                ConsistentRead=True,
            )
        ]
    assert all(len(held) == 1 for held in holders.values()), holders
    assert {h for held in holders.values() for h in held} == {"us-east-1", "eu-west-1"}
    assert fund_total(every_store(), "GENERAL", "USD").pledge_count == len(KEYS)
