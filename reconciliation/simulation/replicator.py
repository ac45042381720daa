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
  (never earlier than its ``ApproximateCreationDateTime``, and each record of a region
  strictly after the one before): late by at most one round (every stream is read side
  by side, then a 50 ms pause; ~100 ms a round on a busy machine). Two writes to one
  item in two regions within one round are ordered by when each stream answered, which
  may differ from their true order; every region still ends up with the same one.
- **Its own writes never come back.** A write it makes to region B appears in B's
  stream; it is recognised by (region, table, key, image before, image after) and
  dropped, so nothing loops. Items carry no marker attribute. A write that would change
  nothing (the region already holds that image) leaves no record and is expected none.
- **Lag.** A change is applied no earlier than the lag after the stand-in read it
  (``--lag-ms N``, default 1000, or ``--lag-ms LOW-HIGH``, drawn per change).
- **ReplicationLatency.** Per table and direction, the time from a change's write time
  (above: it leaves out the up to one round before the stand-in read it) to its
  application elsewhere: the ``dynamo_replication_latency_seconds`` histogram (reaches
  /metrics through ``PROMETHEUS_MULTIPROC_DIR`` like the other processes), a log line
  ``ReplicationLatency table=… p50=… max=…`` per table every minute, and a summary per
  direction on stop. A write that repairs a region's own later write, which a
  replicated older version overtook there, counts with that region as both ends.
- **Streams.** Each shard is read from its trim horizon (so nothing written before the
  stand-in started is missed; a restart replays the streams, which converges to each
  item's latest image in the region read last). A closed shard's children are read after
  it; shards and the stream's ARN are looked up again every few seconds.

What it does not model: transactions are not isolated across regions (a transaction's
items reach another region one by one, each after its own lag); conditional writes are
checked against the local replica only, as on the real service; no per-attribute merge;
TTL deletions replicate like any delete; no 24-hour stream retention, no throttling,
no replica outages or region removal; one process replicates and keeps the per-item
tracker in memory (it grows with the items changed; a restart forgets which writes
were its own and replays the streams). Tests wait with ``wait_converged`` (every
region's every table holds identical items: a Scan, for tests and ops tooling only) or
``Replicator.wait_idle``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from reconciliation import metrics
from reconciliation.dynamo.client import Region, TableNames
from reconciliation.dynamo.tables import table_definitions
from reconciliation.simulation.replicator_lww import (
    Apply,
    Change,
    Image,
    Lag,
    LatencyStats,
    Resolver,
    digest,
    key_id,
)
from reconciliation.simulation.replicator_streams import StreamsMissing, StreamTail, build_clients

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)

SUMMARY_EVERY_S = 60.0
RETRY_AFTER_S = 1.0


class ReplicationTimeout(AssertionError):
    """The regions did not converge in time."""


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
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="replicate")

    def check_streams(self) -> None:
        """Find every stream now: raises ``StreamsMissing`` or a connection error."""
        for tail in self.tails:
            tail.refresh()

    def step(self) -> int:
        """One round: read every stream once, then make the writes that are due; return
        how many records were read. Streams are read, and writes to distinct items made,
        side by side; the bookkeeping stays on this thread, and a round's writes are all
        answered before the next round reads (so each is expected back before it comes)."""
        read = 0
        for tail, changes in zip(self.tails, self._pool.map(self._read, self.tails), strict=True):
            for change in changes:
                read += 1
                self.resolver.observe(tail.rank, change)
        by_item: dict[tuple[int, str, str], list[Apply]] = defaultdict(list)
        for owed in self.resolver.due(time.time()):
            by_item[(owed.destination, owed.table, key_id(owed.keys))].append(owed)
        for outcomes in self._pool.map(self._write, by_item.values()):
            for owed, old_image, failed in outcomes:
                if failed:
                    self.resolver.retry(owed, time.time() + RETRY_AFTER_S)
                else:
                    self._applied(owed, old_image)
        self.records_read += read
        self.rounds += 1
        self._idle_rounds = self._idle_rounds + 1 if not read and self.resolver.settled() else 0
        return read

    def _read(self, tail: StreamTail) -> list[Change]:
        changes: list[Change] = []
        try:
            changes.extend(tail.read())
        except (BotoCoreError, ClientError, StreamsMissing) as exc:
            # What was read before the failure is kept: its shard positions moved on.
            log.warning(
                "replicate_regions: reading %s in %s failed: %s",
                self.labels[tail.table],
                self.regions[tail.rank].name,
                exc,
            )
        return changes

    def _write(self, owed_in_order: list[Apply]) -> list[tuple[Apply, Image, bool]]:
        """The writes owed to one item in one region, in order: (write, image found, failed)."""
        out: list[tuple[Apply, Image, bool]] = []
        for owed in owed_in_order:
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
                out.append((owed, None, True))
                continue
            out.append((owed, answer.get("Attributes"), False))
        return out

    def _applied(self, owed: Apply, old_image: Image) -> None:
        self.resolver.applied(owed, old_image)
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
        self.close()

    def close(self) -> None:
        """Release the reading and writing threads (after ``run`` returned)."""
        self._pool.shutdown(wait=True)


def table_contents(client: DynamoDBClient, table: str, key_names: list[str]) -> dict[str, str]:
    """Every item of ``table`` as key id → content digest (a Scan: tests and ops only)."""
    out: dict[str, str] = {}
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
    keys_of = {
        t.name: [t.hash_key[0]] + ([t.range_key[0]] if t.range_key else [])
        for t in table_definitions(names)
    }
    scans = [(table, client) for table in names.all() for client in clients]
    with ThreadPoolExecutor(max_workers=len(scans)) as pool:
        found = list(pool.map(lambda s: table_contents(s[1], s[0], keys_of[s[0]]), scans))
    out: dict[str, int] = {}
    for i, table in enumerate(names.all()):
        contents = found[i * len(clients) : (i + 1) * len(clients)]
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
