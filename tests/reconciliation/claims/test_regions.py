"""Regional affinity (Global Tables): with several regions configured, every read and
write of one idempotency key goes to that key's home region, never to another replica.
Two DynamoDB Local instances stand in for two regions."""

from __future__ import annotations

import pytest

from reconciliation.claims import intake
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, pledge_home
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo.client import (
    dynamodb_client,
    home_region,
    regions,
)
from reconciliation.stores import every_store, home_store, pledge_stream
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.dynamodb_local_only]


def _has(region, table: str, key: dict) -> bool:
    return "Item" in dynamodb_client(region).get_item(TableName=table, Key=key, ConsistentRead=True)


def test_every_key_lives_only_in_its_home_region(two_regions):
    """40 keys: each claim, pledge and receipt is in its home region and absent from the
    other; both regions are used; GET answers from the home region."""
    names = two_regions
    homes = set()
    for n in range(40):
        key = f"geo-{n}"
        assert submit(key).kind == OutcomeKind.CREATED
        pk = claim_pk("acme", OPERATION_CREATE_PLEDGE, key)
        home = home_region(pk)
        homes.add(home.name)
        (other,) = [r for r in regions() if r != home]
        claim_key = {"pk": {"S": pk}}
        pledge_key = {"intent_id": {"S": f"acme#{key}"}}
        receipt_key = {"stream": {"S": pledge_stream(f"acme#{key}", home.tag)}, "seq": {"N": "1"}}
        assert _has(home, names.idempotency_keys, claim_key)
        assert _has(home, names.pledges, pledge_key)
        assert _has(home, names.audit_events, receipt_key)
        assert not _has(other, names.idempotency_keys, claim_key)
        assert not _has(other, names.pledges, pledge_key)
        assert not _has(other, names.audit_events, receipt_key)
        assert (
            intake.pledge_get(pledge_home("acme", key), tenant="acme", idempotency_key=key)[
                "amount"
            ]
            == "25.00"
        )
        assert submit(key).kind == OutcomeKind.REPLAYED
    assert homes == {"us-east-1", "eu-west-1"}


def test_sweep_finds_stuck_claims_in_every_region_and_opens_cases_at_home(two_regions):
    """Crashed claims homed in both regions: one sweep opens a case for each, written in
    the claim's home region."""
    from reconciliation import clock
    from reconciliation.casework.sweeps import sweep_all
    from tests.reconciliation.factories import crashed_claim

    keys = [f"geo-stuck-{n}" for n in range(8)]
    with clock.travel(-200):
        for key in keys:
            crashed_claim(key)
    report = sweep_all(every_store(), home=home_store)
    assert len(report.opened) == 8
    names = two_regions
    homes = set()
    for key in keys:
        pk = claim_pk("acme", OPERATION_CREATE_PLEDGE, key)
        home = home_region(pk)
        homes.add(home.name)
        item = dynamodb_client(home).get_item(
            TableName=names.idempotency_keys, Key={"pk": {"S": pk}}, ConsistentRead=True
        )["Item"]
        case_id = item["case_id"]["S"]
        assert _has(home, names.cases, {"case_id": {"S": case_id}})
    assert homes == {"us-east-1", "eu-west-1"}


def test_home_region_is_stable_and_spread():
    """The home region is a pure function of the key and spreads keys over regions."""
    from django.test import override_settings

    with override_settings(DDB_REGIONS="a=http://x:1,b=http://y:2,c=http://z:3"):
        picks = [home_region(f"tenant#create_pledge#k{n}").name for n in range(300)]
        assert picks == [home_region(f"tenant#create_pledge#k{n}").name for n in range(300)]
        assert {p: picks.count(p) > 60 for p in "abc"} == {"a": True, "b": True, "c": True}
