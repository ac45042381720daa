"""Table, index and TTL definitions (docs/design.md §3) and the idempotent ``ddb_setup``.

All tables are on-demand, with deletion protection and point-in-time recovery. Indexes
are sparse: an item appears in an index only while it carries the index's hash-key
attribute, so ``pending_by_expiry`` holds PENDING claims only and ``open_by_queue`` holds
unresolved cases only. These definitions are the one source of the tables: ``ddb_setup``
creates them (:func:`ensure_tables`), ``aws_template`` prints them as CloudFormation
(``reconciliation/dynamo/template.py``) and ``iam_policy`` grants on them
(``reconciliation/dynamo/iam.py``).
"""

from __future__ import annotations

import hashlib
import time
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from reconciliation.dynamo.client import TableNames, regions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.literals import BillingModeType, ScalarAttributeTypeType
    from mypy_boto3_dynamodb.type_defs import (
        AttributeDefinitionTypeDef,
        CreateGlobalSecondaryIndexActionTypeDef,
        CreateTableInputTypeDef,
        KeySchemaElementTypeDef,
        ProjectionTypeDef,
        StreamSpecificationTypeDef,
        TableDescriptionTypeDef,
    )

# With several regions every table carries a stream of full before/after images: what
# Global Tables replicate from, and what ``replicate_regions`` (its stand-in) tails.
STREAM_VIEW_TYPE: Final = "NEW_AND_OLD_IMAGES"
# On-demand: no capacity to plan or to be throttled against (docs/capacity.md).
BILLING_MODE: Final[BillingModeType] = "PAY_PER_REQUEST"

PENDING_SHARDS = 16
AUDIT_DAY_SHARDS = 8
# Cases and pledges by the UTC day they were written (``by_day`` on each table), so
# verification finds a subject whose whole audit stream is gone (docs/audit.md).
SUBJECT_DAY_SHARDS = 8
# Pledges whose acknowledgement is due (``acks_due``), spread over this many partitions.
ACK_SHARDS = 8


def ack_shard(intent_id: str) -> str:
    """``A#n``: the ``acks_due`` partition of a pledge, from a hash of its key."""
    return f"A#{int(hashlib.sha256(intent_id.encode()).hexdigest()[:8], 16) % ACK_SHARDS}"


def subject_day_shard(key: str, at: str) -> str:
    """``YYYY-MM-DD#n``: the day of ``at`` (ISO, UTC) and one of ``SUBJECT_DAY_SHARDS``
    shards by ``key``, so one busy day is spread over several partitions."""
    shard = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % SUBJECT_DAY_SHARDS
    return f"{at[:10]}#{shard}"


def donor_search_key(donor_ref: str) -> str:
    """The donor ref as the ``by_donor_key`` indexes hold it: NFKC-normalised and
    casefolded, since DynamoDB has no case-insensitive Query (``syn-1`` finds ``SYN-1``).
    Only the index key is folded; the ref is stored and shown as the client sent it."""
    return unicodedata.normalize("NFKC", donor_ref).casefold()


def donor_key_query(
    client: DynamoDBClient, table: str, donor_ref: str, *, key: str, limit: int
) -> list[str]:
    """The ``key`` attribute of ``table``'s items whose donor ref folds as ``donor_ref``
    does, newest first: one Query of the table's sparse ``by_donor_key`` index."""
    response = client.query(
        TableName=table,
        IndexName="by_donor_key",
        KeyConditionExpression="donor_key = :d",
        ExpressionAttributeValues={":d": {"S": donor_search_key(donor_ref)}},
        ScanIndexForward=False,
        Limit=limit,
    )
    return [i[key]["S"] for i in response.get("Items", [])]


# Attributes a queue page shows, projected into the queue index so a page of 50 rows
# costs one Query and no per-row reads.
CASE_LISTING_ATTRIBUTES = [
    "case_type",
    "state",
    "version",
    "intent_id",
    "tenant",
    "fund",
    "amount",
    "currency",
    "opened_at",
    "last_actor",
    "last_action_at",
    "assignee",
    "override",
    "retry",
]


def _listing_without(key: str) -> list[str]:
    """The listing for a sorted index: its own key attribute is projected anyway."""
    return [a for a in CASE_LISTING_ATTRIBUTES if a != key]


CASE_RESOLVED_ATTRIBUTES = [
    *CASE_LISTING_ATTRIBUTES,
    "resolved_by",
    "resolved_how",
    "resolution",
]


def _project_all() -> ProjectionTypeDef:
    return {"ProjectionType": "ALL"}


def key_schema(
    hash_key: tuple[str, ScalarAttributeTypeType],
    range_key: tuple[str, ScalarAttributeTypeType] | None,
) -> list[KeySchemaElementTypeDef]:
    schema: list[KeySchemaElementTypeDef] = [{"AttributeName": hash_key[0], "KeyType": "HASH"}]
    if range_key:
        schema.append({"AttributeName": range_key[0], "KeyType": "RANGE"})
    return schema


@dataclass(frozen=True)
class Index:
    name: str
    hash_key: tuple[str, ScalarAttributeTypeType]
    range_key: tuple[str, ScalarAttributeTypeType] | None = None
    projection: ProjectionTypeDef = field(default_factory=_project_all)

    def key_schema(self) -> list[KeySchemaElementTypeDef]:
        return key_schema(self.hash_key, self.range_key)

    def attributes(self) -> list[tuple[str, ScalarAttributeTypeType]]:
        return [self.hash_key] + ([self.range_key] if self.range_key else [])

    def definition(self) -> CreateGlobalSecondaryIndexActionTypeDef:
        return {
            "IndexName": self.name,
            "KeySchema": self.key_schema(),
            "Projection": self.projection,
        }


@dataclass(frozen=True)
class Table:
    name: str
    hash_key: tuple[str, ScalarAttributeTypeType]
    range_key: tuple[str, ScalarAttributeTypeType] | None = None
    indexes: tuple[Index, ...] = ()
    ttl_attribute: str | None = None

    def key_schema(self) -> list[KeySchemaElementTypeDef]:
        return key_schema(self.hash_key, self.range_key)

    def attribute_definitions(
        self, indexes: tuple[Index, ...] | None = None
    ) -> list[AttributeDefinitionTypeDef]:
        seen: dict[str, ScalarAttributeTypeType] = {}
        attrs = [self.hash_key] + ([self.range_key] if self.range_key else [])
        for index in self.indexes if indexes is None else indexes:
            attrs.extend(index.attributes())
        for name, kind in attrs:
            seen.setdefault(name, kind)
        return [{"AttributeName": n, "AttributeType": t} for n, t in seen.items()]

    def create_request(self, *, streams: bool = False) -> CreateTableInputTypeDef:
        request: CreateTableInputTypeDef = {
            "TableName": self.name,
            "KeySchema": self.key_schema(),
            "AttributeDefinitions": self.attribute_definitions(),
            "BillingMode": BILLING_MODE,
            # A table of pledges and audit events is never deleted by a slip of the hand:
            # DeleteTable is refused until protection is lifted on purpose (drop_tables).
            "DeletionProtectionEnabled": True,
        }
        if self.indexes:
            request["GlobalSecondaryIndexes"] = [i.definition() for i in self.indexes]
        if streams:
            request["StreamSpecification"] = stream_specification()
        return request


def streams_by_default() -> bool:
    """Whether the tables carry a stream: when ``DDB_REGIONS`` names several regions."""
    return len(regions()) > 1


def stream_specification() -> StreamSpecificationTypeDef:
    return {"StreamEnabled": True, "StreamViewType": STREAM_VIEW_TYPE}


def table_definitions(names: TableNames) -> list[Table]:
    return [
        Table(
            name=names.idempotency_keys,
            hash_key=("pk", "S"),
            indexes=(
                Index(
                    "pending_by_expiry",
                    ("pending_shard", "S"),
                    ("expires_at", "N"),
                    # The sweep re-reads each candidate consistently; keys suffice.
                    {"ProjectionType": "KEYS_ONLY"},
                ),
            ),
            # Not the lease (expires_at): see repositories/claims.py.
            ttl_attribute="purge_at",
        ),
        Table(
            name=names.pledges,
            hash_key=("intent_id", "S"),
            indexes=(
                # Pledges by the day they were written: verification compares each one's
                # stored head with its stream, even when the stream is gone entirely.
                Index(
                    "by_day",
                    ("day_shard", "S"),
                    ("created_at", "S"),
                    {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["ledger_key"]},
                ),
                # Pledges whose acknowledgement webhook is due (docs/webhooks.md): written
                # by the commit transaction itself, left when every delivery is settled.
                # The dispatcher re-reads each one consistently; keys suffice.
                Index(
                    "acks_due",
                    ("ack_shard", "S"),
                    ("ack_due_at", "N"),
                    {"ProjectionType": "KEYS_ONLY"},
                ),
                # Pledges by donor ref in any letter case (``donor_search_key``), for the
                # staff search: a pledge with no case is found by its donor too.
                Index(
                    "by_donor_key",
                    ("donor_key", "S"),
                    ("created_at", "S"),
                    {"ProjectionType": "KEYS_ONLY"},
                ),
            ),
        ),
        Table(name=names.ledger, hash_key=("fund", "S")),
        Table(
            name=names.cases,
            hash_key=("case_id", "S"),
            indexes=(
                Index(
                    "open_by_queue",
                    ("queue", "S"),
                    ("queue_sort", "S"),
                    {"ProjectionType": "INCLUDE", "NonKeyAttributes": CASE_LISTING_ATTRIBUTES},
                ),
                Index(
                    "by_intent",
                    ("intent_id", "S"),
                    ("opened_at", "S"),
                    {"ProjectionType": "KEYS_ONLY"},
                ),
                # The queue sorted by amount or by fund: the same sparse
                # ``queue`` key, so a sorted page is one Query of ``Limit`` rows too.
                Index(
                    "open_by_amount",
                    ("queue", "S"),
                    ("amount", "N"),
                    {"ProjectionType": "INCLUDE", "NonKeyAttributes": _listing_without("amount")},
                ),
                Index(
                    "open_by_fund",
                    ("queue", "S"),
                    ("fund", "S"),
                    {"ProjectionType": "INCLUDE", "NonKeyAttributes": _listing_without("fund")},
                ),
                # "My cases": open cases by assignee, oldest first (a resolved case
                # loses queue_sort, so it leaves this index with its queue).
                Index(
                    "open_by_assignee",
                    ("assignee", "S"),
                    ("queue_sort", "S"),
                    {
                        "ProjectionType": "INCLUDE",
                        "NonKeyAttributes": [*CASE_LISTING_ATTRIBUTES, "queue"],
                    },
                ),
                # Search by donor ref, any letter case: ``donor_key`` is the folded ref
                # (``donor_search_key``), written when the case is opened. It replaces
                # ``by_donor`` (keyed on the ref as given, so case-sensitive), which
                # ddb_setup no longer creates; docs/design.md §3 says how to retire it.
                Index(
                    "by_donor_key",
                    ("donor_key", "S"),
                    ("opened_at", "S"),
                    {"ProjectionType": "KEYS_ONLY"},
                ),
                # Cases by the day they were opened, for verification (as pledges).
                Index(
                    "by_day",
                    ("day_shard", "S"),
                    ("opened_at", "S"),
                    {"ProjectionType": "KEYS_ONLY"},
                ),
                # Resolved cases, newest first: one partition per month of resolution.
                Index(
                    "resolved_by_time",
                    ("resolved_month", "S"),
                    ("resolved_sort", "S"),
                    {"ProjectionType": "INCLUDE", "NonKeyAttributes": CASE_RESOLVED_ATTRIBUTES},
                ),
            ),
        ),
        Table(
            name=names.audit_events,
            hash_key=("stream", "S"),
            range_key=("seq", "N"),
            indexes=(Index("by_day", ("day_shard", "S"), ("at_id", "S")),),
        ),
        # The intake request log (reconciliation/claims/request_log.py): every answer
        # of the intake API by key, and the refused ones (sparse) by tenant and day.
        Table(
            name=names.requests,
            hash_key=("subject", "S"),
            range_key=("at_id", "S"),
            indexes=(Index("rejected_by_day", ("rejected_shard", "S"), ("at_id", "S")),),
            ttl_attribute="purge_at",
        ),
    ]


def ensure_tables(
    client: DynamoDBClient, names: TableNames, *, streams: bool | None = None
) -> list[str]:
    """Create whatever table, index, stream, TTL setting, deletion protection or
    point-in-time recovery is missing; return what was done.

    Existing tables are never altered beyond adding a missing index, enabling the
    stream, TTL, deletion protection or point-in-time recovery, so running this twice is
    a no-op the second time. ``streams`` (default: when ``DDB_REGIONS`` names several
    regions) gives every table a ``NEW_AND_OLD_IMAGES`` stream; a single-region setup has
    none. An engine without backups (DynamoDB Local) is left without point-in-time
    recovery: there is nothing to turn on.
    """
    if streams is None:
        streams = streams_by_default()
    done: list[str] = []
    for table in table_definitions(names):
        description = _describe(client, table.name)
        if description is None:
            done.append(_table_create(client, table, streams=streams))
        else:
            done.extend(_table_complete(client, table, description, streams=streams))
        if table.ttl_attribute:
            done.extend(_ensure_ttl(client, table.name, table.ttl_attribute))
        done.extend(_ensure_point_in_time_recovery(client, table.name))
    return done


def _table_create(client: DynamoDBClient, table: Table, *, streams: bool) -> str:
    try:
        client.create_table(**table.create_request(streams=streams))
    except ClientError as exc:
        # A create whose answer was lost and retried by the SDK finds its own table.
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
    client.get_waiter("table_exists").wait(
        TableName=table.name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    return f"created table {table.name}"


def _table_complete(
    client: DynamoDBClient, table: Table, description: TableDescriptionTypeDef, *, streams: bool
) -> list[str]:
    """Add to an existing table what it lacks: deletion protection, indexes, a stream."""
    done: list[str] = []
    if not description.get("DeletionProtectionEnabled"):
        _wait_active(client, table.name)
        client.update_table(TableName=table.name, DeletionProtectionEnabled=True)
        done.append(f"enabled deletion protection on {table.name}")
    existing = {i["IndexName"] for i in description.get("GlobalSecondaryIndexes", [])}
    for index in table.indexes:
        if index.name in existing:
            continue
        client.update_table(
            TableName=table.name,
            AttributeDefinitions=table.attribute_definitions((index,)),
            GlobalSecondaryIndexUpdates=[{"Create": index.definition()}],
        )
        # One index creation at a time per table (DynamoDB refuses a second
        # UpdateTable while the table is UPDATING).
        _wait_active(client, table.name)
        done.append(f"created index {table.name}.{index.name}")
    if streams:
        done.extend(_ensure_stream(client, table.name, description))
    return done


def _ensure_ttl(client: DynamoDBClient, name: str, attribute: str) -> list[str]:
    ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
        return []
    client.update_time_to_live(
        TableName=name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute},
    )
    return [f"enabled TTL on {name}.{attribute}"]


def _ensure_point_in_time_recovery(client: DynamoDBClient, name: str) -> list[str]:
    """Continuous backups with point-in-time recovery (35 days) on ``name``."""
    for _ in range(60):
        try:
            backups = client.describe_continuous_backups(TableName=name)
            recovery = backups["ContinuousBackupsDescription"].get(
                "PointInTimeRecoveryDescription", {}
            )
            if recovery.get("PointInTimeRecoveryStatus") == "ENABLED":
                return []
            client.update_continuous_backups(
                TableName=name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
            )
            return [f"enabled point-in-time recovery on {name}"]
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "UnknownOperationException":
                # DynamoDB Local keeps no backups and knows neither operation.
                return []
            if code != "ContinuousBackupsUnavailableException":
                raise
            # AWS turns continuous backups on by itself for a new table, a moment after
            # it is ACTIVE; recovery can be enabled once they are.
            time.sleep(1)
    raise TimeoutError(f"continuous backups of {name} did not become available in 60 s")


def _ensure_stream(
    client: DynamoDBClient, name: str, description: TableDescriptionTypeDef
) -> list[str]:
    """Enable the table's stream with full images; one of another view type is replaced
    (DynamoDB changes a view type only by disabling the stream and enabling a new one)."""
    current = description.get("StreamSpecification")
    enabled = bool(current and current.get("StreamEnabled"))
    if enabled and current and current.get("StreamViewType") == STREAM_VIEW_TYPE:
        return []
    if enabled:
        _wait_active(client, name)
        client.update_table(TableName=name, StreamSpecification={"StreamEnabled": False})
    _wait_active(client, name)
    client.update_table(TableName=name, StreamSpecification=stream_specification())
    _wait_active(client, name)
    return [f"enabled stream {STREAM_VIEW_TYPE} on {name}"]


def drop_tables(client: DynamoDBClient, names: TableNames) -> None:
    """Delete scratch tables (tests, the fault explorer's oracle), lifting the deletion
    protection every table is created with. Nothing in production calls this."""
    for name in names.all():
        try:
            client.update_table(TableName=name, DeletionProtectionEnabled=False)
            client.delete_table(TableName=name)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise


def _wait_active(client: DynamoDBClient, name: str, *, attempts: int = 600) -> None:
    for _ in range(attempts):
        description = _describe(client, name)
        if description is None:
            return
        states = [description.get("TableStatus")] + [
            i.get("IndexStatus") for i in description.get("GlobalSecondaryIndexes", [])
        ]
        if all(s in (None, "ACTIVE") for s in states):
            return
        time.sleep(1)


def _describe(client: DynamoDBClient, name: str) -> TableDescriptionTypeDef | None:
    try:
        return client.describe_table(TableName=name)["Table"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ResourceNotFoundException":
            return None
        raise
