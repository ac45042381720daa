"""``aws_template``: the tables as CloudFormation, from the definitions ``ddb_setup``
creates them from. cfn-lint finds nothing in it, and the stack it makes on moto's
CloudFormation holds the tables and indexes ``ddb_setup`` makes on DynamoDB Local."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from cfnlint.api import ManualArgs, lint
from django.core.management import call_command

from reconciliation.dynamo.client import TableNames, dynamodb_client, reset_clients
from reconciliation.dynamo.tables import drop_tables, ensure_tables, table_definitions
from reconciliation.dynamo.template import cloudformation_template, logical_id

REGION = "us-east-1"


def _template_of_command(settings, *, prefix: str, regions: str = "") -> dict[str, Any]:
    settings.DDB_TABLE_PREFIX = prefix
    settings.DDB_REGIONS = regions
    settings.DDB_PRIMARY_REGION = ""
    out = io.StringIO()
    call_command("aws_template", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.parametrize("streams", [False, True], ids=["one-region", "several-regions"])
def test_cfn_lint_finds_nothing_in_the_template(streams):
    """The template of one region's tables, with and without streams, passes cfn-lint."""
    template = cloudformation_template(prefix="pledges-", streams=streams)
    matches = lint(json.dumps(template), config=ManualArgs(regions=[REGION]))
    assert [str(m) for m in matches] == []


def test_the_command_prints_every_table_of_the_configured_prefix(settings):
    """Each table is a protected, recoverable, on-demand table named with the prefix,
    kept when the stack goes; streams only with several regions."""
    template = _template_of_command(settings, prefix="acme-")
    names = TableNames.from_prefix("acme-")
    resources = template["Resources"]
    assert sorted(r["Properties"]["TableName"] for r in resources.values()) == sorted(names.all())
    assert resources[logical_id("idempotency_keys")]["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "purge_at",
        "Enabled": True,
    }
    for resource in resources.values():
        properties = resource["Properties"]
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"
        assert properties["BillingMode"] == "PAY_PER_REQUEST"
        assert properties["DeletionProtectionEnabled"] is True
        assert properties["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": True
        }
        assert "StreamSpecification" not in properties
    two = _template_of_command(settings, prefix="acme-", regions="us-east-1,eu-west-1")
    assert {
        json.dumps(r["Properties"]["StreamSpecification"]) for r in two["Resources"].values()
    } == {json.dumps({"StreamViewType": "NEW_AND_OLD_IMAGES"})}


def _index_shape(index: dict[str, Any]) -> dict[str, Any]:
    projection = dict(index["Projection"])
    if "NonKeyAttributes" in projection:
        projection["NonKeyAttributes"] = sorted(projection["NonKeyAttributes"])
    return {"KeySchema": index["KeySchema"], "Projection": projection}


def _shape(client, names: TableNames) -> dict[str, dict[str, Any]]:
    """What describe_table says of each table, in the terms a template fixes."""
    out = {}
    for table in table_definitions(names):
        described = client.describe_table(TableName=table.name)["Table"]
        stream = described.get("StreamSpecification") or {}
        out[table.name] = {
            "KeySchema": described["KeySchema"],
            "AttributeDefinitions": sorted(
                described["AttributeDefinitions"], key=lambda a: a["AttributeName"]
            ),
            "BillingMode": described["BillingModeSummary"]["BillingMode"],
            "GlobalSecondaryIndexes": {
                i["IndexName"]: _index_shape(i) for i in described.get("GlobalSecondaryIndexes", [])
            },
            "LocalSecondaryIndexes": {
                i["IndexName"]: _index_shape(i) for i in described.get("LocalSecondaryIndexes", [])
            },
            "Stream": stream.get("StreamViewType") if stream.get("StreamEnabled") else None,
            "DeletionProtectionEnabled": described.get("DeletionProtectionEnabled"),
        }
    return out


def _ttl(client, names: TableNames) -> dict[str, str | None]:
    out = {}
    for table in table_definitions(names):
        ttl = client.describe_time_to_live(TableName=table.name)["TimeToLiveDescription"]
        enabled = ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING")
        out[table.name] = ttl.get("AttributeName") if enabled else None
    return out


def _plain_client(endpoint_url: str | None):
    return boto3.session.Session().client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@contextmanager
def _moto() -> Iterator[None]:
    """moto for the block, keeping every backend's data: a reset would empty the moto
    table pool the other tests of this session draw from (tests/table_pool.py)."""
    from moto import mock_aws

    mock = mock_aws()
    mock.start(reset=False)
    try:
        yield
    finally:
        mock.stop(remove_data=False)


@pytest.mark.parametrize("streams", [False, True], ids=["one-region", "several-regions"])
def test_the_stack_on_moto_holds_what_ddb_setup_makes_on_dynamodb_local(
    dynamodb_local, settings, streams
):
    """One definition, two outputs: every table's keys, attributes, indexes and their
    projections, billing mode, stream and deletion protection agree between the
    template's stack on moto and ``ddb_setup`` on DynamoDB Local, and so does the TTL
    attribute (read from the template: moto's CloudFormation leaves TTL off)."""
    prefix = f"cfn{uuid.uuid4().hex[:8]}-"
    names = TableNames.from_prefix(prefix)
    settings.DDB_TABLE_PREFIX = prefix
    settings.DDB_REGIONS = ""
    settings.FAULT_INJECTION = ""
    settings.DYNAMODB_ENDPOINT_URL = dynamodb_local.endpoint_url
    reset_clients()
    try:
        ensure_tables(dynamodb_client(), names, streams=streams)
        local = _plain_client(dynamodb_local.endpoint_url)
        made_by_setup = _shape(local, names)
        ttl_by_setup = _ttl(local, names)
    finally:
        drop_tables(_plain_client(dynamodb_local.endpoint_url), names)
        reset_clients()

    template = cloudformation_template(prefix=prefix, streams=streams)
    with _moto():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        stack = f"tables-{uuid.uuid4().hex[:8]}"
        cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps(template))
        status = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
        moto = _plain_client(None)
        try:
            made_by_stack = _shape(moto, names)
        finally:
            drop_tables(moto, names)
    assert status == "CREATE_COMPLETE"
    assert made_by_stack == made_by_setup
    assert made_by_setup[names.cases]["GlobalSecondaryIndexes"]  # the comparison saw indexes
    ttl_in_template = {}
    for resource in template["Resources"].values():
        properties = resource["Properties"]
        ttl = properties.get("TimeToLiveSpecification", {})
        ttl_in_template[properties["TableName"]] = ttl.get("AttributeName")
    assert ttl_in_template == ttl_by_setup
