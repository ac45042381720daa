"""``ddb_setup``: creates every table, index and TTL; a no-op the second time; fails fast
and in one line against an engine that is down."""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import CommandError, call_command

from reconciliation.dynamo.client import dynamodb_client, reset_clients
from reconciliation.dynamo.local import free_port

# Each test derives new table names from its prefix, so the prefix must be its own.
pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.fresh_tables]


def _run() -> str:
    out = io.StringIO()
    call_command("ddb_setup", stdout=out)
    return out.getvalue()


def test_setup_creates_all_tables_indexes_and_ttl(ddb, settings):
    """On a fresh prefix every table of docs/design.md §3 is created with its indexes and TTL."""
    settings.DDB_TABLE_PREFIX = "fresh-" + ddb.tables.cases.split("-")[0] + "-"
    reset_clients()
    output = _run()
    client = ddb.client
    prefix = settings.DDB_TABLE_PREFIX
    for table in ("idempotency_keys", "pledges", "ledger", "cases", "audit_events"):
        assert f"created table {prefix}{table}" in output
    keys = client.describe_table(TableName=f"{prefix}idempotency_keys")["Table"]
    assert [i["IndexName"] for i in keys["GlobalSecondaryIndexes"]] == ["pending_by_expiry"]
    assert keys["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = client.describe_time_to_live(TableName=f"{prefix}idempotency_keys")
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "purge_at"
    cases = client.describe_table(TableName=f"{prefix}cases")["Table"]
    assert {i["IndexName"] for i in cases["GlobalSecondaryIndexes"]} == {
        "open_by_queue",
        "by_intent",
        "open_by_amount",
        "open_by_fund",
        "open_by_assignee",
        "by_donor_key",
        "by_day",
        "resolved_by_time",
    }
    pledges = client.describe_table(TableName=f"{prefix}pledges")["Table"]
    assert {i["IndexName"] for i in pledges["GlobalSecondaryIndexes"]} == {
        "by_day",
        "acks_due",
        "by_donor_key",
    }
    audit = client.describe_table(TableName=f"{prefix}audit_events")["Table"]
    assert [k["AttributeName"] for k in audit["KeySchema"]] == ["stream", "seq"]
    assert [i["IndexName"] for i in audit["GlobalSecondaryIndexes"]] == ["by_day"]


@pytest.fixture
def own_engine(ddb, settings):
    """The test's engine: moto as every test has it, or a DynamoDB Local of its own.
    Adding indexes to a table of the worker's shared DynamoDB Local, after a few hundred
    other tests' tables came and went there, twice left an index CREATING for over five
    minutes in a full run (never alone); a deployment's engine is not that busy."""
    if ddb.name != "dynamodb_local":
        yield ddb.client
        return
    from reconciliation.dynamo import local

    engine = local.start_dynamodb_local()
    try:
        settings.DYNAMODB_ENDPOINT_URL = engine.endpoint_url
        reset_clients()
        yield dynamodb_client()
    finally:
        engine.stop()
        reset_clients()


def test_missing_indexes_are_added_to_an_existing_table(ddb, own_engine, settings):
    """A cases table made with only its first two indexes (an older deployment) gets the
    new ones, one at a time (DynamoDB adds one index per UpdateTable), and keeps its
    items; a second run does nothing."""
    from reconciliation.dynamo.tables import table_definitions

    settings.DDB_TABLE_PREFIX = "older-" + ddb.tables.cases.split("-")[0] + "-"
    reset_clients()
    from reconciliation.dynamo.client import table_names

    client = dynamodb_client()
    names = table_names()
    [cases] = [t for t in table_definitions(names) if t.name == names.cases]
    old = [i for i in cases.indexes if i.name in ("open_by_queue", "by_intent")]
    request = cases.create_request()
    request["AttributeDefinitions"] = cases.attribute_definitions(tuple(old))
    request["GlobalSecondaryIndexes"] = [i.definition() for i in old]
    client.create_table(**request)
    client.put_item(TableName=names.cases, Item={"case_id": {"S": "C-AAAAAAAAAAAAAAAA"}})
    output = _run()
    for index in ("open_by_amount", "open_by_fund", "open_by_assignee", "by_donor_key", "by_day"):
        assert f"created index {names.cases}.{index}" in output
    described = client.describe_table(TableName=names.cases)["Table"]
    assert len(described["GlobalSecondaryIndexes"]) == 8
    assert client.get_item(TableName=names.cases, Key={"case_id": {"S": "C-AAAAAAAAAAAAAAAA"}})[
        "Item"
    ]
    assert "created index" not in _run()


def _recovery(client, name: str) -> str | None:
    """The table's point-in-time recovery status; ``None`` where the engine keeps no
    backups at all (DynamoDB Local answers UnknownOperationException)."""
    from botocore.exceptions import ClientError

    try:
        backups = client.describe_continuous_backups(TableName=name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "UnknownOperationException":
            raise
        return None
    description = backups["ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]
    return description["PointInTimeRecoveryStatus"]


def test_tables_are_made_deletion_protected_and_recoverable(ddb):
    """Every table refuses DeleteTable until its protection is lifted, and has
    point-in-time recovery where the engine keeps backups (moto); DynamoDB Local keeps
    none, so there is nothing to turn on (docs/configuration.md)."""
    from botocore.exceptions import ClientError

    for name in ddb.tables.all():
        assert ddb.client.describe_table(TableName=name)["Table"]["DeletionProtectionEnabled"]
        expected = "ENABLED" if ddb.name == "moto" else None
        assert _recovery(ddb.client, name) == expected
    with pytest.raises(ClientError) as refused:
        ddb.client.delete_table(TableName=ddb.tables.audit_events)
    assert "protect" in str(refused.value).lower()


def test_older_tables_get_protection_and_recovery_and_drop_tables_lifts_it(ddb, settings):
    """Tables made before ddb_setup protected them are protected (and made recoverable,
    where the engine can) by the next run, which says so once; drop_tables, for scratch
    tables, still deletes them."""
    from reconciliation.dynamo.client import TableNames
    from reconciliation.dynamo.tables import drop_tables, table_definitions

    settings.DDB_TABLE_PREFIX = "unprotected-" + ddb.tables.cases.split("-")[0] + "-"
    reset_clients()
    names = TableNames.from_prefix(settings.DDB_TABLE_PREFIX)
    client = dynamodb_client()
    for table in table_definitions(names):
        request = table.create_request()
        request["DeletionProtectionEnabled"] = False
        client.create_table(**request)
    try:
        output = _run()
        for name in names.all():
            assert f"enabled deletion protection on {name}" in output
            assert (f"enabled point-in-time recovery on {name}" in output) == (ddb.name == "moto")
            assert client.describe_table(TableName=name)["Table"]["DeletionProtectionEnabled"]
        assert "nothing to do" in _run()
    finally:
        drop_tables(client, names)
    assert not set(names.all()) & set(client.list_tables()["TableNames"])


def test_second_run_is_a_no_op(ddb):
    """Tables made by the fixture already exist: the command reports nothing to do."""
    assert "nothing to do" in _run()
    assert "nothing to do" in _run()


def test_unreachable_engine_fails_in_seconds_with_one_line(settings):
    """An endpoint where nothing listens: a CommandError naming the problem and the fix."""
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    reset_clients()
    started = time.monotonic()
    with pytest.raises(CommandError) as info:
        _run()
    elapsed = time.monotonic() - started
    reset_clients()
    message = str(info.value)
    assert "\n" not in message
    assert "unreachable" in message and "dynamodb_local" in message
    assert elapsed < 10
