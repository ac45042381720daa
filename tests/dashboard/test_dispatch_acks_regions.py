"""With several regions each pledge's acknowledgement is sent by one region's
dispatcher only: the one its key is homed in (replicas of it sit in every region's
``acks_due``, and leases are not shared between replicas)."""

from __future__ import annotations

from dashboard.tenancy.management.commands.dispatch_acks import homed_in
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.dynamo.client import home_region, reset_clients
from reconciliation.stores import every_store


def test_each_intent_is_owned_by_exactly_its_home_region(settings):
    """Over 200 keys, exactly one region's store owns each, and it is the key's home."""
    settings.DDB_REGIONS = "us-east-1=http://127.0.0.1:9,eu-west-1=http://127.0.0.1:9"
    settings.DDB_PRIMARY_REGION = "us-east-1"
    reset_clients()
    try:
        stores = every_store()
        owners = {s.region_name: homed_in(s) for s in stores}
        homes = set()
        for n in range(200):
            intent_id = f"acme#k-{n}"
            owning = [name for name, owns in owners.items() if owns(intent_id)]
            home = home_region(claim_pk("acme", OPERATION_CREATE_PLEDGE, f"k-{n}")).name
            assert owning == [home]
            homes.add(home)
        assert homes == {"us-east-1", "eu-west-1"}
    finally:
        reset_clients()


def test_once_with_dynamodb_unreachable_fails_clearly(settings, db):
    """``--once`` against an engine nobody listens on: a clear error, no traceback."""
    import pytest
    from django.core.management import CommandError, call_command

    from reconciliation.dynamo.local import free_port

    settings.DDB_REGIONS = ""
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    reset_clients()
    try:
        with pytest.raises(CommandError, match="DynamoDB could not be read"):
            call_command("dispatch_acks", "--once")
    finally:
        reset_clients()
