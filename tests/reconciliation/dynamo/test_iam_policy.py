"""``iam_policy --account ID``: the least-privilege IAM policy of the configured prefix and
regions, as docs/configuration.md prints it. That the code's calls keep inside it, and
use all of it, is checked over the whole suite by tests/iam_recorder.py."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from reconciliation.dynamo.iam import LOGICAL, Need, call_needs, grants
from reconciliation.dynamo.tables import table_definitions

ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "123456789012"


def _policy(settings, *, prefix: str = "pledges-", regions: str = "", region: str = "us-east-1"):
    settings.DDB_TABLE_PREFIX = prefix
    settings.DDB_REGIONS = regions
    settings.DDB_PRIMARY_REGION = ""
    settings.AWS_REGION = region
    out = io.StringIO()
    call_command("iam_policy", "--account", ACCOUNT, stdout=out)
    return json.loads(out.getvalue())


def _statements(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in policy["Statement"]}


def test_the_policy_names_every_regions_tables_under_the_prefix(settings):
    """Two regions and the prefix ``acme-``: every statement lists its tables in both
    regions, in the given account, and nothing else."""
    policy = _policy(settings, prefix="acme-", regions="us-east-1,eu-west-1")
    assert policy["Version"] == "2012-10-17"
    administration = _statements(policy)["TableAdministration"]
    names = [t.name for t in table_definitions(LOGICAL)]
    assert administration["Resource"] == [
        f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/acme-{name}"
        # The primary region first: the smallest name, as no DDB_PRIMARY_REGION is set.
        for region in ("eu-west-1", "us-east-1")
        for name in names
    ]
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        for arn in statement["Resource"]:
            assert re.fullmatch(
                rf"arn:aws:dynamodb:(us-east-1|eu-west-1):{ACCOUNT}:table/acme-\w+(/index/\w+)?",
                arn,
            ), arn


def test_no_statement_grants_every_action_or_every_resource_and_indexes_only_query(settings):
    """No ``dynamodb:*``, no ``Resource: "*"``; an index ARN appears only where the one
    action is Query; every Sid is distinct."""
    policy = _policy(settings)
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids))
    for statement in policy["Statement"]:
        assert all("*" not in action for action in statement["Action"])
        assert all("*" not in arn for arn in statement["Resource"])
        if any("/index/" in arn for arn in statement["Resource"]):
            assert statement["Action"] == ["dynamodb:Query"]


def test_table_administration_and_serving_are_separate_statements(settings):
    """ddb_setup's table actions are in statements of their own, TTL only on the tables
    with a TTL attribute; serving never creates or alters a table, and the audit trail
    is never granted an update, a delete or a batch write."""
    statements = _statements(_policy(settings))
    assert statements["TableAdministration"]["Action"] == [
        "dynamodb:CreateTable",
        "dynamodb:DescribeContinuousBackups",
        "dynamodb:DescribeTable",
        "dynamodb:UpdateContinuousBackups",
        "dynamodb:UpdateTable",
    ]
    assert statements["TimeToLiveAdministration"]["Resource"] == [
        f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/pledges-idempotency_keys",
        f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/pledges-requests",
    ]
    serving = [s for sid, s in statements.items() if sid.startswith("Serve")]
    assert len(serving) == 6
    for statement in serving:
        assert not {"dynamodb:CreateTable", "dynamodb:UpdateTable", "dynamodb:DeleteTable"} & set(
            statement["Action"]
        )
    assert statements["ServeAuditEvents"]["Action"] == [
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
    ]
    assert statements["BackfillScans"]["Action"] == ["dynamodb:Scan"]


def test_every_index_is_granted_query_by_its_own_arn():
    """QueryIndexes names each index of each table once, and no table."""
    [query] = [g for g in grants() if g.sid == "QueryIndexes"]
    expected = [(t.name, i.name) for t in table_definitions(LOGICAL) for i in t.indexes]
    assert [(r.table, r.index) for r in query.resources] == expected


def test_an_account_that_is_not_twelve_digits_is_refused(settings):
    """``--account`` is an AWS account id: anything else is a CommandError, not a policy
    naming the wrong account."""
    settings.DDB_REGIONS = ""
    with pytest.raises(CommandError, match="12 digits"):
        call_command("iam_policy", "--account", "my-account", stdout=io.StringIO())


def test_regions_outside_the_commercial_partition_get_their_own(settings):
    """A China or GovCloud region's ARNs carry its partition."""
    for region, partition in (("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")):
        statement = _policy(settings, region=region)["Statement"][0]
        assert statement["Resource"][0].startswith(f"arn:{partition}:dynamodb:{region}:")


def test_a_transaction_needs_each_items_own_action_on_its_table():
    """IAM has no TransactWriteItems action: each Put, Update, Delete and ConditionCheck
    is authorised as PutItem, UpdateItem, DeleteItem and ConditionCheckItem on its table;
    a batch needs its action on each table; a Query of an index, the index."""
    transaction = {
        "TransactItems": [
            {"Put": {"TableName": "p-pledges", "Item": {}}},
            {"Update": {"TableName": "p-ledger", "Key": {}}},
            {"Delete": {"TableName": "p-cases", "Key": {}}},
            {"ConditionCheck": {"TableName": "p-idempotency_keys", "Key": {}}},
        ]
    }
    assert call_needs("TransactWriteItems", transaction) == [
        Need("PutItem", "p-pledges"),
        Need("UpdateItem", "p-ledger"),
        Need("DeleteItem", "p-cases"),
        Need("ConditionCheckItem", "p-idempotency_keys"),
    ]
    batch = {"RequestItems": {"p-cases": {"Keys": []}, "p-ledger": {"Keys": []}}}
    assert call_needs("BatchGetItem", batch) == [
        Need("BatchGetItem", "p-cases"),
        Need("BatchGetItem", "p-ledger"),
    ]
    query = {"TableName": "p-cases", "IndexName": "by_intent"}
    assert call_needs("Query", query) == [Need("Query", "p-cases", "by_intent")]


def _documented_policy() -> dict[str, Any]:
    text = (ROOT / "docs/configuration.md").read_text()
    section = text.split("### The IAM policy", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert block, "docs/configuration.md: no JSON block under '### The IAM policy'"
    return json.loads(block.group(1))


def test_the_docs_print_the_policy_the_command_prints(settings):
    """docs/configuration.md shows the command's output for the default prefix,
    ``us-east-1`` and account 123456789012, so the two cannot drift apart."""
    assert _documented_policy() == _policy(settings)
