"""A Global Tables stand-in for tests and demos: ``manage.py replicate_regions``.

It tails the DynamoDB Stream (``NEW_AND_OLD_IMAGES``, which ``ddb_setup`` enables when
``DDB_REGIONS`` names several regions) of every table in each region's engine and
applies each change to every other region after the configured lag: INSERT and MODIFY
as a PutItem of the new image, REMOVE as a DeleteItem.

What it models of Global Tables:

- **Last writer wins per item.** Every region converges to the version with the latest
  write time; a tie goes to the region listed later in ``DDB_REGIONS``. Deletes take
  part as tombstones. A change that loses to a later write already known from another
  region is not replicated, and its own region is brought to the winner too (the
  regions converge, never diverge). Conflicts are per item, never per attribute.
- **Write time.** The real service stamps a write in the region that takes it. DynamoDB
  Local rounds a record's ``ApproximateCreationDateTime`` down to the minute, too coarse
  to order writes, so a change's time is when the stand-in read it from the stream
  (never earlier than its ``ApproximateCreationDateTime``): exact to one poll interval
  (default 50 ms). Two writes to one item in two regions within one poll interval are
  ordered as they were read, which may differ from their true order; every region still
  ends up with the same one.
- **Its own writes never come back.** A write it makes to region B appears in B's
  stream; it is recognised by (region, table, key, image before, image after) and
  dropped, so nothing loops. Items carry no marker attribute. A write that would change
  nothing (the region already holds that image) leaves no record and is expected none.
- **Lag.** A change is applied no earlier than the lag after the stand-in read it
  (``--lag-ms N``, default 1000, or ``--lag-ms LOW-HIGH``, drawn per change).
- **ReplicationLatency.** Per table and direction, the time from a change's write to its
  application elsewhere: the ``dynamo_replication_latency_seconds`` histogram (reaches
  /metrics through ``PROMETHEUS_MULTIPROC_DIR`` like the other processes), a log line
  ``ReplicationLatency table=… p50=… max=…`` per table every minute, and a summary on
  stop.
- **Streams.** Each shard is read from its trim horizon (so nothing written before the
  stand-in started is missed; a restart replays the streams, which converges to each
  item's latest image in the region read last). A closed shard's children are read after
  it; shards and the stream's ARN are looked up again every few seconds.

What it does not model: transactions are not isolated across regions (a transaction's
items reach another region one by one, each after its own lag); conditional writes are
checked against the local replica only, as on the real service; no per-attribute merge;
TTL deletions replicate like any delete; no 24-hour stream retention, no throttling or
replica outages; the per-item tracker lives in memory (one process replicates; a restart
loses the versions it knew). Tests wait with ``wait_converged`` (every region's every
table holds identical items: a Scan, for tests and ops tooling only) or
``Replicator.wait_idle``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from reconciliation import metrics
from reconciliation.dynamo.client import Region, TableNames, client_config, patience
from reconciliation.ops.replicator_lww import (
    Apply,
    Change,
    Lag,
    LatencyStats,
    Resolver,
    digest,
    key_id,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

log = logging.getLogger(__name__)

REFRESH_EVERY_S = 5.0
SUMMARY_EVERY_S = 60.0
RETRY_AFTER_S = 1.0


class StreamsMissing(Exception):
    """A table has no ``NEW_AND_OLD_IMAGES`` stream: ``ddb_setup`` was not run with every
    region in ``DDB_REGIONS``."""


class ReplicationTimeout(AssertionError):
    """The regions did not converge in time."""


def build_clients(region: Region) -> tuple[DynamoDBClient, DynamoDBStreamsClient]:
    """The stand-in's own clients: batch patience, no fault injection, no request metrics."""
    session = boto3.session.Session()
    kwargs: dict[str, Any] = {
        "region_name": region.name,
        "config": client_config(patience(batch=True)),
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
        spec = self.dynamodb.describe_table(TableName=self.table)["Table"]
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
        return self.streams.get_shard_iterator(**kwargs)["ShardIterator"]

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
                    old_image=data.get("OldImage"),
                    new_image=None if record["eventName"] == "REMOVE" else data.get("NewImage"),
                    created=created.timestamp() if created else 0.0,
                    seen=seen,
                )
            shard.iterator = answer.get("NextShardIterator")
            if shard.iterator is None:
                # Closed and read to its end: its children may start now.
                shard.done = True
                self.refresh_at = 0.0


class Replicator:
    """Replicates every table of ``names`` between ``regions`` until stopped: ``run(stop)``
    in the foreground, or ``start()``/``stop()`` on a thread (tests)."""

    def __init__(
        self,
        regions: list[Region],
        names: TableNames,
        *,
        lag: Lag,
        poll_interval_s: float = 0.05,
        rng: random.Random | None = None,
    ):
        if len(regions) < 2:
            raise ValueError("replication needs at least two regions in DDB_REGIONS")
        self.regions = regions
        self.names = names
        self.poll_interval_s = poll_interval_s
        self.resolver = Resolver(len(regions), lag, rng)
        prefix = names.idempotency_keys.removesuffix("idempotency_keys")
        self.labels = {name: name.removeprefix(prefix) for name in names.all()}
        self.clients = [build_clients(region) for region in regions]
        self.tails = [
            StreamTail(rank, table, dynamodb, streams)
            for rank, (dynamodb, streams) in enumerate(self.clients)
            for table in names.all()
        ]
        self.stats = LatencyStats()
        self.records_read = 0
        self.writes = 0
        self.rounds = 0
        self._idle_rounds = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check_streams(self) -> None:
        """Find every stream now: raises ``StreamsMissing`` or a connection error."""
        for tail in self.tails:
            tail.refresh()

    def step(self) -> int:
        """One round: read every stream once and make the writes that are due; return
        how many records were read."""
        read = 0
        for tail in self.tails:
            try:
                for change in tail.read():
                    read += 1
                    self.resolver.observe(tail.rank, change)
            except (BotoCoreError, ClientError) as exc:
                log.warning(
                    "replicate_regions: reading %s in %s failed: %s",
                    self.labels[tail.table],
                    self.regions[tail.rank].name,
                    exc,
                )
        for owed in self.resolver.due(time.time()):
            self._apply(owed)
        self.records_read += read
        self.rounds += 1
        self._idle_rounds = self._idle_rounds + 1 if not read and self.resolver.settled() else 0
        return read

    def _apply(self, owed: Apply) -> None:
        dynamodb, _ = self.clients[owed.destination]
        try:
            if owed.version.image is None:
                answer = dynamodb.delete_item(
                    TableName=owed.table, Key=owed.keys, ReturnValues="ALL_OLD"
                )
            else:
                answer = dynamodb.put_item(
                    TableName=owed.table, Item=owed.version.image, ReturnValues="ALL_OLD"
                )
        except (BotoCoreError, ClientError) as exc:
            log.warning("replicate_regions: write to %s failed, retrying: %s", owed.table, exc)
            self.resolver.retry(owed, time.time() + RETRY_AFTER_S)
            return
        self.resolver.applied(owed, answer.get("Attributes"))
        self.writes += 1
        seconds = max(0.0, time.time() - owed.version.at)
        label = self.labels[owed.table]
        source = self.regions[owed.version.rank].name
        destination = self.regions[owed.destination].name
        metrics.REPLICATION_LATENCY.labels(label, source, destination).observe(seconds)
        self.stats.add(label, source, destination, seconds)

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or self._stop
        summary_at = time.monotonic() + SUMMARY_EVERY_S
        while not stop.is_set():
            read = self.step()
            if time.monotonic() >= summary_at:
                for line in self.stats.periodic_lines():
                    log.info(line)
                summary_at = time.monotonic() + SUMMARY_EVERY_S
            if read:
                continue
            pause = self.poll_interval_s
            next_due = self.resolver.next_due()
            if next_due is not None:
                pause = min(pause, max(0.0, next_due - time.time()))
            stop.wait(pause)

    def idle(self) -> bool:
        """Nothing owed, none of its writes still to come back, and the last round read
        nothing."""
        return self._idle_rounds > 0

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Return once two full rounds that began after this call were idle."""
        start = self.rounds
        deadline = time.monotonic() + timeout
        while not (self.rounds >= start + 3 and self._idle_rounds >= 2):
            if time.monotonic() > deadline:
                raise ReplicationTimeout(f"replicator not idle after {timeout:.0f} s")
            time.sleep(0.02)

    def start(self) -> Replicator:
        self.check_streams()
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="replicate_regions", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def table_contents(client: DynamoDBClient, table: str) -> dict[str, str]:
    """Every item of ``table`` as key id → content digest (a Scan: tests and ops only)."""
    out: dict[str, str] = {}
    schema = client.describe_table(TableName=table)["Table"]["KeySchema"]
    key_names = [k["AttributeName"] for k in schema]
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        for item in page.get("Items", []):
            out[key_id({k: item[k] for k in key_names})] = digest(item)
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def differences(
    regions: list[Region], names: TableNames, clients: list[DynamoDBClient] | None = None
) -> dict[str, int]:
    """Per table, how many items are not identical in every region (empty: converged)."""
    clients = clients or [build_clients(region)[0] for region in regions]
    out: dict[str, int] = {}
    for table in names.all():
        contents = [table_contents(client, table) for client in clients]
        keys = set().union(*contents)
        differing = sum(1 for k in keys if len({c.get(k) for c in contents}) > 1)
        if differing:
            out[table] = differing
    return out


def wait_converged(
    regions: list[Region], names: TableNames, *, timeout: float = 30.0, every: float = 0.1
) -> None:
    """Return once every region's every table holds identical items; raise
    ``ReplicationTimeout`` naming the tables that still differ after ``timeout``."""
    clients = [build_clients(region)[0] for region in regions]
    deadline = time.monotonic() + timeout
    while True:
        left = differences(regions, names, clients)
        if not left:
            return
        if time.monotonic() > deadline:
            raise ReplicationTimeout(f"regions differ after {timeout:.0f} s: {left}")
        time.sleep(every)
