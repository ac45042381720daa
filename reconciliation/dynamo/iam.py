"""The least-privilege IAM policy of this configuration (``manage.py iam_policy``).

What the code asks of DynamoDB is declared here, table by table, and printed as a policy
for the configured table prefix and regions: ``ddb_setup``'s table administration, what
every serving process does (web, worker, beat, the acknowledgement dispatcher, the
commands) and the two Scans of ``backfill_cases``. No statement grants ``dynamodb:*`` or
``Resource: "*"``, and an index ARN is granted ``Query`` alone. The test suite records
every call the code sends (``tests/iam_recorder.py``) and fails on a call this policy
does not allow, and, after a whole run, on a grant no call used.

How IAM authorises the calls the code makes (the Service Authorization Reference, and
"Using IAM with DynamoDB transactions" in the DynamoDB guide): there is no
``dynamodb:TransactWriteItems`` action; each item of a transaction needs its own action
(``PutItem``, ``UpdateItem``, ``DeleteItem``, ``ConditionCheckItem``) on its table.
``BatchGetItem`` and ``BatchWriteItem`` are actions of their own, on every table the
batch names. A ``Query`` naming an index is authorised on the index's ARN
(``table/NAME/index/INDEX``), not the table's. DynamoDB Streams (``dynamodbstreams:*``)
are read only by ``replicate_regions``, the Global Tables stand-in for tests and demos;
on AWS, Global Tables replicate by themselves, so nothing here grants them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.tables import table_definitions

POLICY_VERSION: Final = "2012-10-17"
ACCOUNT_RE = re.compile(r"\d{12}")

# The tables by their logical names: the names with an empty prefix.
LOGICAL: Final = TableNames.from_prefix("")


class Action(StrEnum):
    """The DynamoDB IAM actions the code needs (``dynamodb:`` + the value)."""

    CREATE_TABLE = "CreateTable"
    DESCRIBE_TABLE = "DescribeTable"
    UPDATE_TABLE = "UpdateTable"
    DESCRIBE_TIME_TO_LIVE = "DescribeTimeToLive"
    UPDATE_TIME_TO_LIVE = "UpdateTimeToLive"
    DESCRIBE_CONTINUOUS_BACKUPS = "DescribeContinuousBackups"
    UPDATE_CONTINUOUS_BACKUPS = "UpdateContinuousBackups"
    GET_ITEM = "GetItem"
    PUT_ITEM = "PutItem"
    UPDATE_ITEM = "UpdateItem"
    DELETE_ITEM = "DeleteItem"
    BATCH_GET_ITEM = "BatchGetItem"
    BATCH_WRITE_ITEM = "BatchWriteItem"
    QUERY = "Query"
    SCAN = "Scan"

    @property
    def iam(self) -> str:
        return f"dynamodb:{self.value}"


class Purpose(StrEnum):
    """Who needs a statement: an operator may give each its own identity."""

    TABLE_ADMINISTRATION = "ddb_setup"
    SERVING = "serving"
    BACKFILL = "backfill_cases"


@dataclass(frozen=True)
class Resource:
    """A table, or one of its indexes, by logical name (``cases``, ``open_by_queue``)."""

    table: str
    index: str | None = None

    def arn(self, *, region: str, account: str, prefix: str) -> str:
        path = f"table/{prefix}{self.table}"
        if self.index:
            path += f"/index/{self.index}"
        return f"arn:{partition(region)}:dynamodb:{region}:{account}:{path}"


@dataclass(frozen=True)
class Grant:
    """One statement: ``actions`` on every region's copy of ``resources``."""

    sid: str
    purpose: Purpose
    actions: tuple[Action, ...]
    resources: tuple[Resource, ...]

    def statement(self, *, regions: Sequence[str], account: str, prefix: str) -> dict[str, Any]:
        return {
            "Sid": self.sid,
            "Effect": "Allow",
            "Action": sorted(a.iam for a in self.actions),
            "Resource": [
                r.arn(region=region, account=account, prefix=prefix)
                for region in regions
                for r in self.resources
            ],
        }


def partition(region: str) -> str:
    """The ARN partition a region belongs to."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


# What serving does to each table's items, besides Query on the indexes (every index is
# queried: an index nobody queries would be dead weight on every write). Per table, so
# the audit trail is never granted UpdateItem or DeleteItem.
def _serving(names: TableNames) -> dict[str, tuple[Action, ...]]:
    a = Action
    return {
        # The health check describes the claims table; claims are put, fenced and read,
        # and read in batches by the approvals page (each request's claim beside it).
        names.idempotency_keys: (
            a.DESCRIBE_TABLE,
            a.GET_ITEM,
            a.PUT_ITEM,
            a.UPDATE_ITEM,
            a.BATCH_GET_ITEM,
        ),
        # Put by the commit, updated by voids and acknowledgements, read in batches by
        # audit verification and the approvals page.
        names.pledges: (a.GET_ITEM, a.PUT_ITEM, a.UPDATE_ITEM, a.BATCH_GET_ITEM),
        # Shards updated by the commit and read in batches; the drift checkpoint is put;
        # the drill deletes the probe item it wrote.
        names.ledger: (
            a.GET_ITEM,
            a.PUT_ITEM,
            a.UPDATE_ITEM,
            a.DELETE_ITEM,
            a.BATCH_GET_ITEM,
        ),
        names.cases: (a.GET_ITEM, a.PUT_ITEM, a.UPDATE_ITEM, a.BATCH_GET_ITEM),
        # Append-only: put (conditioned on the next seq) and read, never updated, deleted
        # or batch-written (a batch write cannot be conditioned: it would overwrite).
        names.audit_events: (a.GET_ITEM, a.PUT_ITEM, a.QUERY),
        # Put by the commit (a new pledge's entry), batch-written by the buffer that keeps
        # every other answer off the request path, read by the pledge page.
        names.requests: (a.PUT_ITEM, a.BATCH_WRITE_ITEM, a.QUERY),
    }


def grants() -> list[Grant]:
    """Every statement the code needs, on logical table names."""
    tables = table_definitions(LOGICAL)
    every = tuple(Resource(t.name) for t in tables)
    with_ttl = tuple(Resource(t.name) for t in tables if t.ttl_attribute)
    serving = _serving(LOGICAL)
    out = [
        Grant(
            "TableAdministration",
            Purpose.TABLE_ADMINISTRATION,
            (
                Action.CREATE_TABLE,
                Action.DESCRIBE_TABLE,
                Action.UPDATE_TABLE,
                Action.DESCRIBE_CONTINUOUS_BACKUPS,
                Action.UPDATE_CONTINUOUS_BACKUPS,
            ),
            every,
        ),
        Grant(
            "TimeToLiveAdministration",
            Purpose.TABLE_ADMINISTRATION,
            (Action.DESCRIBE_TIME_TO_LIVE, Action.UPDATE_TIME_TO_LIVE),
            with_ttl,
        ),
    ]
    out.extend(
        Grant(f"Serve{_camel(t.name)}", Purpose.SERVING, serving[t.name], (Resource(t.name),))
        for t in tables
    )
    out.append(
        Grant(
            "QueryIndexes",
            Purpose.SERVING,
            (Action.QUERY,),
            tuple(Resource(t.name, i.name) for t in tables for i in t.indexes),
        )
    )
    # A maintenance command, run once after an upgrade (docs/operations.md).
    out.append(
        Grant(
            "BackfillScans",
            Purpose.BACKFILL,
            (Action.SCAN,),
            (Resource(LOGICAL.pledges), Resource(LOGICAL.cases)),
        )
    )
    return out


def policy_document(*, prefix: str, regions: Sequence[str], account: str) -> dict[str, Any]:
    """The IAM policy (JSON-ready) for tables named ``prefix``+table in ``regions`` of
    ``account``."""
    if not ACCOUNT_RE.fullmatch(account):
        raise ValueError(f"an AWS account id is 12 digits, not {account!r}")
    if not regions:
        raise ValueError("no region configured")
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            g.statement(regions=regions, account=account, prefix=prefix) for g in grants()
        ],
    }


@dataclass(frozen=True)
class Need:
    """What IAM checks for (part of) one call: ``action`` on ``table`` (as the call
    names it) or on one of its indexes."""

    action: str
    table: str
    index: str | None = None


_TRANSACT_ACTIONS: Final = {
    "Put": Action.PUT_ITEM,
    "Update": Action.UPDATE_ITEM,
    "Delete": Action.DELETE_ITEM,
    "ConditionCheck": "ConditionCheckItem",
    "Get": Action.GET_ITEM,
}


def call_needs(operation: str, params: Mapping[str, Any]) -> list[Need]:
    """The authorisations one DynamoDB call (``operation`` with its API ``params``) needs."""
    if operation in ("TransactWriteItems", "TransactGetItems"):
        needs = []
        for item in params.get("TransactItems", []):
            for kind, body in item.items():
                needs.append(Need(str(_TRANSACT_ACTIONS.get(kind, kind)), body["TableName"]))
        return needs
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [Need(operation, table) for table in params.get("RequestItems", {})]
    return [Need(operation, params.get("TableName", ""), params.get("IndexName"))]
