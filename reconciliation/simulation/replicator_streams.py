"""Reading DynamoDB Streams for the Global Tables stand-in (``replicator.py``): one
table's stream in one region, every shard from its trim horizon, a closed shard's
children after it, the shards and the stream's ARN looked up again every few seconds.

DynamoDB Local serves Streams on the table's own endpoint. Its quirks, as measured:
``ApproximateCreationDateTime`` is rounded down to the minute; a ``LATEST`` iterator
taken while a shard is empty answers ``TrimmedDataAccessException`` once records exist
(hence ``TRIM_HORIZON``); a write that changes nothing leaves no record; an empty map
(``{"M": {}}``) appears in a record's images as ``{}``, which no write accepts (hence
:func:`repaired`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from reconciliation.dynamo.client import Region, batch_patience, client_config
from reconciliation.simulation.replicator_lww import Change

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

REFRESH_EVERY_S = 5.0


class StreamsMissing(Exception):
    """A table has no ``NEW_AND_OLD_IMAGES`` stream: ``ddb_setup`` was not run with every
    region in ``DDB_REGIONS``."""


def _value(value: dict[str, Any]) -> dict[str, Any]:
    if not value:
        return {"M": {}}
    if "M" in value:
        return {"M": {k: _value(v) for k, v in value["M"].items()}}
    if "L" in value:
        return {"L": [_value(v) for v in value["L"]]}
    return value


def repaired(image: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stream record's image as the table holds it: DynamoDB Local writes an empty map
    as ``{}``, and copying that to another region is refused (``ValidationException``:
    the attribute value is empty), so the copy would be retried for ever."""
    if image is None:
        return None
    return {name: _value(value) for name, value in image.items()}


def build_clients(region: Region) -> tuple[DynamoDBClient, DynamoDBStreamsClient]:
    """The stand-in's own clients: batch patience, no fault injection, no request metrics."""
    session = boto3.session.Session()
    kwargs: dict[str, Any] = {
        "region_name": region.name,
        "config": client_config(batch_patience()),
    }
    if region.endpoint_url:
        kwargs["endpoint_url"] = region.endpoint_url
        if session.get_credentials() is None:
            kwargs["aws_access_key_id"] = "local"
            kwargs["aws_secret_access_key"] = "local"
    return session.client("dynamodb", **kwargs), session.client("dynamodbstreams", **kwargs)


@dataclass
class _Shard:
    parent: str | None
    iterator: str | None = None
    last_seq: str | None = None
    done: bool = False


@dataclass
class StreamTail:
    """The reader of one table's stream in one region."""

    rank: int
    table: str
    dynamodb: DynamoDBClient
    streams: DynamoDBStreamsClient
    arn: str = ""
    shards: dict[str, _Shard] = field(default_factory=dict)
    refresh_at: float = 0.0

    def refresh(self) -> None:
        try:
            spec = self.dynamodb.describe_table(TableName=self.table)["Table"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            raise StreamsMissing(
                f"{self.table} does not exist: run `manage.py ddb_setup` with every region in "
                "DDB_REGIONS"
            ) from None
        arn = spec.get("LatestStreamArn", "")
        stream = spec.get("StreamSpecification")
        enabled = bool(stream and stream.get("StreamEnabled"))
        if not arn or not enabled:
            raise StreamsMissing(
                f"{self.table} has no stream: run `manage.py ddb_setup` with every region in "
                "DDB_REGIONS"
            )
        if arn != self.arn:
            self.arn, self.shards = arn, {}
        start: str | None = None
        while True:
            kwargs: dict[str, Any] = {"StreamArn": self.arn}
            if start:
                kwargs["ExclusiveStartShardId"] = start
            description = self.streams.describe_stream(**kwargs)["StreamDescription"]
            for shard in description.get("Shards", []):
                self.shards.setdefault(shard["ShardId"], _Shard(shard.get("ParentShardId")))
            start = description.get("LastEvaluatedShardId")
            if not start:
                break
        for shard_id, shard in self.shards.items():
            parent = self.shards.get(shard.parent) if shard.parent else None
            if shard.iterator is None and not shard.done and (parent is None or parent.done):
                shard.iterator = self._iterator(shard_id, shard.last_seq)
        self.refresh_at = time.monotonic() + REFRESH_EVERY_S

    def _iterator(self, shard_id: str, after: str | None) -> str:
        kwargs: dict[str, Any] = {"StreamArn": self.arn, "ShardId": shard_id}
        if after:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
        else:
            kwargs["ShardIteratorType"] = "TRIM_HORIZON"
        iterator: str = self.streams.get_shard_iterator(**kwargs)["ShardIterator"]
        return iterator

    def read(self) -> Iterator[Change]:
        if time.monotonic() >= self.refresh_at:
            self.refresh()
        for shard_id, shard in list(self.shards.items()):
            if shard.iterator is None:
                continue
            try:
                answer = self.streams.get_records(ShardIterator=shard.iterator, Limit=1000)
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                if code not in ("ExpiredIteratorException", "TrimmedDataAccessException"):
                    self.refresh_at = 0.0
                    raise
                after = shard.last_seq if code == "ExpiredIteratorException" else None
                shard.iterator = self._iterator(shard_id, after)
                continue
            seen = time.time()
            for record in answer.get("Records", []):
                data = record["dynamodb"]
                shard.last_seq = data.get("SequenceNumber", shard.last_seq)
                created = data.get("ApproximateCreationDateTime")
                yield Change(
                    table=self.table,
                    keys=data["Keys"],
                    old_image=repaired(data.get("OldImage")),
                    new_image=(
                        None if record["eventName"] == "REMOVE" else repaired(data.get("NewImage"))
                    ),
                    created=created.timestamp() if created else 0.0,
                    seen=seen,
                )
            shard.iterator = answer.get("NextShardIterator")
            if shard.iterator is None:
                # Closed and read to its end: its children may start now.
                shard.done = True
                self.refresh_at = 0.0
