"""The ledger drift check, second line behind the region map: an intent
recorded in two regions is found whatever the cause, including two records under the
same names (the untagged pledge stream and ledger shard in both regions), which the
check used to drop as "a replica of another region's stream". Failed before: the run
reported ``{"opened": [], "duplicates": []}``."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import override_settings

from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.drift.compare import ALL
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo.client import dynamodb_client, regions, reset_clients
from tests.helpers import AS_SYSTEM
from tests.reconciliation.casework.test_ledger_drift import quick, run  # noqa: F401
from tests.reconciliation.factories import submit
from tests.reconciliation.test_regions_routing import keys_homed

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.dynamodb_local_only]


def test_one_intent_recorded_in_both_regions_under_one_name_is_named(quick, settings):  # noqa: F811
    """Two processes each took their own region for the untagged one (another order of
    ``DDB_REGIONS``, another primary: the cause does not matter here) and, unpinned, each
    recorded ``one-name-1`` at home: the same stream name and the untagged ledger shard
    in both regions. The check opens one overall LEDGER_DRIFT case naming the intent as a
    duplicate in eu-west-1, counts it once, and stays quiet on the next run."""
    names = quick
    run()
    east, west = settings.DDB_REGIONS.split(",")
    settings.ALLOW_FAULT_INJECTION = True
    settings.DDB_UNPINNED = True
    for here, listing in (("us-east-1", f"{east},{west}"), ("eu-west-1", f"{west},{east}")):
        with override_settings(DDB_REGIONS=listing, DDB_PRIMARY_REGION=here, AWS_REGION=here):
            reset_clients()
            assert submit("one-name-1", amount="25.00").kind == OutcomeKind.CREATED
    settings.DDB_UNPINNED = False
    reset_clients()
    for region in regions():  # one name in both regions: neither is a replica of the other
        receipt = dynamodb_client(region).get_item(
            TableName=names.audit_events,
            Key={"stream": {"S": "PLEDGE#acme#one-name-1"}, "seq": {"N": "1"}},
        )
        assert "Item" in receipt, region.name
    report, _ = run()
    assert report.duplicates == ["acme#one-name-1"]
    [case_id] = report.opened
    drift = CaseRepository(AS_SYSTEM.store).get(case_id).evidence.drift
    assert drift["scope"] == ALL
    assert Decimal(drift["difference"]) == 25
    [named] = drift["intents"]
    assert (named["intent_id"], named["why"], named["region_name"]) == (
        "acme#one-name-1",
        "duplicate",
        "eu-west-1",
    )
    for _ in range(2):
        again, _ = run()
        assert again.opened == [] and again.duplicates == []


def test_a_replica_of_another_regions_receipt_is_no_stray(quick):  # noqa: F811
    """Replication copies every receipt into the other region (same event id, same
    stream name): the check reads it there, finds the same event at its owner, and
    reports nothing."""
    names = quick
    run()
    for key in keys_homed("us-east-1", "copied", 2) + keys_homed("eu-west-1", "copied", 2):
        assert submit(key, amount="10.00").kind == OutcomeKind.CREATED
    first, second = regions()
    for source, target in ((first, second), (second, first)):
        items = dynamodb_client(source).scan(TableName=names.audit_events)["Items"]
        for item in items:
            if item["stream"]["S"].startswith("PLEDGE#"):
                dynamodb_client(target).put_item(TableName=names.audit_events, Item=item)
    report, _ = run()
    assert report.opened == [] and report.duplicates == [], report
