"""The Global Tables stand-in (``manage.py replicate_regions``): streams on every table
when several regions are configured, changes reach the other region after the lag,
last writer wins and converges, its own writes never loop, and the command stops
cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

from reconciliation.dynamo.client import TableNames, dynamodb_client, regions
from reconciliation.dynamo.tables import drop_tables, ensure_tables
from reconciliation.simulation.replicator import (
    Replicator,
    differences,
    wait_converged,
)
from reconciliation.simulation.replicator_lww import Change, Lag, Resolver, digest
from reconciliation.simulation.replicator_streams import StreamTail
from tests.processes import wait_for

ROOT = Path(__file__).resolve().parents[3]


def _item(intent: str, **attrs: str) -> dict:
    return {"intent_id": {"S": intent}, **{k: {"S": v} for k, v in attrs.items()}}


def _change(intent: str, new: dict | None, *, at: float, old: dict | None = None) -> Change:
    return Change("t", {"intent_id": {"S": intent}}, old, new, created=0.0, seen=at)


# --- last writer wins, without an engine ----------------------------------------------


def test_lag_accepts_a_fixed_value_or_a_range():
    assert Lag.parse("200") == Lag(200, 200)
    assert Lag.parse("200-2000") == Lag(200, 2000)
    with pytest.raises(ValueError):
        Lag.parse("2000-200")
    with pytest.raises(ValueError):
        Lag.parse("soon")


def test_a_change_is_owed_to_every_other_region_no_earlier_than_the_lag():
    resolver = Resolver(3, Lag(500, 500))
    owed = resolver.observe(1, _change("a", _item("a", v="1"), at=100.0))
    assert sorted(o.destination for o in owed) == [0, 2]
    assert resolver.due(100.49) == []
    assert sorted(o.destination for o in resolver.due(100.5)) == [0, 2]


def test_a_change_that_loses_to_a_later_write_brings_its_own_region_to_the_winner():
    """Region 1's Y is known, written at t=10; a record of region 0 written at t=5 comes
    after it: X is not replicated, and region 0 is owed Y (converge, never diverge)."""
    resolver = Resolver(2, Lag(0, 0))
    resolver.observe(1, _change("a", _item("a", v="Y"), at=10.0))
    owed = resolver.observe(0, _change("a", _item("a", v="X"), at=5.0))
    assert [(o.destination, o.version.image) for o in owed] == [(0, _item("a", v="Y"))]
    assert resolver.conflicts_lost == 1
    assert {o.version.digest for o in resolver.due(20.0)} == {digest(_item("a", v="Y"))}


def test_records_of_one_region_read_in_one_batch_win_in_stream_order():
    """Two changes to one item read in the same batch carry the same read time: the
    later record still wins (and nothing is owed to its own region)."""
    resolver = Resolver(2, Lag(0, 0))
    x, y = _item("a", v="X"), _item("a", v="Y")
    resolver.observe(0, _change("a", x, at=7.0))
    owed = resolver.observe(0, _change("a", y, at=7.0, old=x))
    assert [(o.destination, o.version.image) for o in owed] == [(1, y)]
    assert resolver.conflicts_lost == 0
    assert [o.version.image for o in resolver.due(7.0)] == [y]


def test_a_tie_goes_to_the_region_listed_later_and_a_delete_is_a_tombstone():
    resolver = Resolver(2, Lag(0, 0))
    resolver.observe(1, _change("a", None, at=10.0, old=_item("a")))
    owed = resolver.observe(0, _change("a", _item("a", v="X"), at=10.0))
    assert [(o.destination, o.version.image) for o in owed] == [(0, None)]


def test_its_own_write_coming_back_is_dropped():
    resolver = Resolver(2, Lag(0, 0))
    x = _item("a", v="X")
    (owed,) = resolver.observe(0, _change("a", x, at=1.0))
    assert resolver.due(1.0) == [owed]
    resolver.applied(owed, None)  # region 1 had nothing
    assert not resolver.settled()
    assert resolver.observe(1, _change("a", x, at=1.1)) == []
    assert resolver.echoes_dropped == 1 and resolver.settled()
    # The same change made by region 1 itself later is not an echo.
    later = resolver.observe(1, _change("a", x, at=3.0))
    assert [o.destination for o in later] == [0]


def test_a_write_that_overtook_a_local_change_is_repaired():
    """Region 1 changed X to Y just before the stand-in wrote region 0's Z over it:
    Y (the later write) wins, and once Z comes back region 1 is owed Y again."""
    resolver = Resolver(2, Lag(0, 0))
    x, y, z = _item("a", v="X"), _item("a", v="Y"), _item("a", v="Z")
    (owed,) = resolver.observe(0, _change("a", z, at=1.5, old=x))
    assert resolver.due(1.5) == [owed]
    resolver.applied(owed, y)  # region 1 held Y, a write not read yet
    assert [o.destination for o in resolver.observe(1, _change("a", y, at=2.0, old=x))] == [0]
    repair = resolver.observe(1, _change("a", z, at=2.0, old=y))
    assert [(o.destination, o.version.image) for o in repair] == [(1, y)]
    assert resolver.echoes_dropped == 1
    (again,) = [o for o in resolver.due(2.0) if o.destination == 1]
    resolver.applied(again, z)
    assert resolver.observe(1, _change("a", y, at=2.1, old=z)) == []


class _RolledStream:
    """A stream whose first shard closed and rolled over to a child (DynamoDB Local
    rolls no shard within a test's time): answers as DynamoDB Streams does."""

    def __init__(self):
        self.pages = {
            "parent:0": ([_record("1", "1")], "parent:1"),
            "parent:1": ([], None),  # closed, read to its end
            "child:0": ([_record("2", "2")], "child:1"),
            "child:1": ([], "child:1"),
        }

    def describe_table(self, TableName):
        return {"Table": {"LatestStreamArn": "arn", "StreamSpecification": {"StreamEnabled": True}}}

    def describe_stream(self, StreamArn):
        shards = [{"ShardId": "child", "ParentShardId": "parent"}, {"ShardId": "parent"}]
        return {"StreamDescription": {"Shards": shards}}

    def get_shard_iterator(self, StreamArn, ShardId, ShardIteratorType, **_):
        assert ShardIteratorType == "TRIM_HORIZON"
        return {"ShardIterator": f"{ShardId}:0"}

    def get_records(self, ShardIterator, Limit):
        records, following = self.pages[ShardIterator]
        return {"Records": records, "NextShardIterator": following}


def _record(intent: str, seq: str) -> dict:
    keys = {"intent_id": {"S": intent}}
    return {
        "eventName": "INSERT",
        "dynamodb": {"Keys": keys, "NewImage": keys, "SequenceNumber": seq},
    }


def test_a_rolled_over_shard_is_read_after_its_parent_from_its_trim_horizon():
    stream = _RolledStream()
    tail = StreamTail(0, "t", stream, stream)
    assert [c.keys["intent_id"]["S"] for c in tail.read()] == ["1"]
    assert list(tail.read()) == []  # the parent closes; its child starts at the next look
    assert [c.keys["intent_id"]["S"] for c in tail.read()] == ["2"]
    assert tail.shards["parent"].done and not tail.shards["child"].done


# --- against two DynamoDB Local engines -----------------------------------------------

pytestmark_local = pytest.mark.dynamodb_local_only


@contextmanager
def running(names: TableNames, lag_ms: str) -> Iterator[Replicator]:
    replicator = Replicator(regions(), names, lag=Lag.parse(lag_ms), poll_interval_s=0.02)
    replicator.start()
    try:
        yield replicator
    finally:
        replicator.stop()


def _clients():
    return [dynamodb_client(region) for region in regions()]


def _get(client, names: TableNames, intent: str) -> dict | None:
    answer = client.get_item(
        TableName=names.pledges, Key={"intent_id": {"S": intent}}, ConsistentRead=True
    )
    return answer.get("Item")


@pytest.mark.engines("moto")
def test_a_single_region_keeps_its_tables_without_streams(ddb):
    for name in ddb.tables.all():
        spec = ddb.client.describe_table(TableName=name)["Table"]
        assert not (spec.get("StreamSpecification") or {}).get("StreamEnabled")


@pytestmark_local
def test_every_table_has_a_full_image_stream_with_two_regions_and_setup_is_idempotent(
    two_regions, settings
):
    for client in _clients():
        for name in two_regions.all():
            spec = client.describe_table(TableName=name)["Table"]["StreamSpecification"]
            assert spec == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        assert ensure_tables(client, two_regions) == []
    # Tables made before the second region was configured get their stream enabled.
    older = TableNames.from_prefix(f"{two_regions.pledges.removesuffix('pledges')}old-")
    first = _clients()[0]
    try:
        ensure_tables(first, older, streams=False)
        spec = first.describe_table(TableName=older.pledges)["Table"]
        assert not (spec.get("StreamSpecification") or {}).get("StreamEnabled")
        done = ensure_tables(first, older)
        assert f"enabled stream NEW_AND_OLD_IMAGES on {older.pledges}" in done
        assert ensure_tables(first, older) == []
    finally:
        drop_tables(first, older)


@pytestmark_local
def test_a_put_update_and_delete_reach_the_other_region_after_the_lag(two_regions):
    east, west = _clients()
    before = REGISTRY.get_sample_value(
        "dynamo_replication_latency_seconds_count",
        {"table": "pledges", "source": "us-east-1", "destination": "eu-west-1"},
    )
    with running(two_regions, "300") as replicator:
        written = time.monotonic()
        east.put_item(TableName=two_regions.pledges, Item=_item("p1", status="RECORDED"))
        assert _get(west, two_regions, "p1") is None  # not before the lag
        wait_for(
            lambda: _get(west, two_regions, "p1"),
            timeout=10,
            interval=0.02,
            what="the put to reach eu-west-1",
        )
        assert time.monotonic() - written >= 0.3  # not before the lag either
        assert _get(west, two_regions, "p1") == _item("p1", status="RECORDED")

        west.update_item(
            TableName=two_regions.pledges,
            Key={"intent_id": {"S": "p1"}},
            UpdateExpression="SET #s = :v",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":v": {"S": "VOIDED"}},
        )
        wait_converged(regions(), two_regions, timeout=10)
        assert _get(east, two_regions, "p1") == _item("p1", status="VOIDED")

        east.delete_item(TableName=two_regions.pledges, Key={"intent_id": {"S": "p1"}})
        wait_converged(regions(), two_regions, timeout=10)
        assert _get(west, two_regions, "p1") is None
        replicator.wait_idle(10)
        latencies = replicator.stats.all_values()
    assert len(latencies) == 3 and min(latencies) >= 0.3
    after = REGISTRY.get_sample_value(
        "dynamo_replication_latency_seconds_count",
        {"table": "pledges", "source": "us-east-1", "destination": "eu-west-1"},
    )
    assert after == (before or 0) + 2  # the put and the delete went east -> west


@pytestmark_local
def test_concurrent_writes_to_one_item_converge_to_the_later_writer_and_nothing_loops(
    two_regions,
):
    east, west = _clients()
    with running(two_regions, "2000") as replicator:
        east.put_item(TableName=two_regions.pledges, Item=_item("k", v="east"))
        east.put_item(TableName=two_regions.ledger, Item={"fund": {"S": "GENERAL#USD"}})
        # East's writes are read: west writes later.
        wait_for(
            lambda: replicator.records_read >= 2,
            timeout=10,
            interval=0.01,
            what="the replicator to read east's writes",
        )
        # West writes the same item before east's version reaches it (lag 2 s).
        assert _get(west, two_regions, "k") is None
        west.put_item(TableName=two_regions.pledges, Item=_item("k", v="west"))
        wait_converged(regions(), two_regions, timeout=10)
        replicator.wait_idle(10)
        assert _get(east, two_regions, "k") == _item("k", v="west")
        assert _get(west, two_regions, "k") == _item("k", v="west")
        # A quiet period after convergence, counted in the replicator's own rounds (each
        # reads every stream once) rather than in seconds, so a loaded machine cannot
        # shorten it: no write, no record read, still identical.
        writes, read, rounds = replicator.writes, replicator.records_read, replicator.rounds
        wait_for(
            lambda: replicator.rounds >= rounds + 50,
            timeout=60,
            interval=0.05,
            what="50 more replication rounds",
        )
        assert (replicator.writes, replicator.records_read) == (writes, read)
        assert replicator.idle()
        assert replicator.resolver.echoes_dropped >= 2
    assert differences(regions(), two_regions) == {}


@pytestmark_local
def test_the_command_replicates_and_stops_cleanly_on_sigterm(two_regions, settings, tmp_path):
    """Run as make run would: its ReplicationLatency samples land in the multiprocess
    folder /metrics sums."""
    env = {
        **os.environ,
        "DDB_REGIONS": settings.DDB_REGIONS,
        "DDB_PRIMARY_REGION": settings.DDB_PRIMARY_REGION,
        "DDB_TABLE_PREFIX": settings.DDB_TABLE_PREFIX,
        "DYNAMODB_ENDPOINT_URL": "",
        "FAULT_INJECTION": "",
        "PYTHONUNBUFFERED": "1",
    }
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    east, west = _clients()
    east.put_item(TableName=two_regions.pledges, Item=_item("before-start", v="1"))
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "replicate_regions", "--lag-ms", "200"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        # six tables (the intake request log too) in two regions
        assert first.startswith("replicate_regions: 12 streams"), proc.stderr.read()
        west.put_item(TableName=two_regions.pledges, Item=_item("after-start", v="2"))
        wait_converged(regions(), two_regions, timeout=15)
        assert _get(west, two_regions, "before-start") == _item("before-start", v="1")
        assert _get(east, two_regions, "after-start") == _item("after-start", v="2")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "ReplicationLatency table=pledges us-east-1->eu-west-1 n=1" in out
    assert "ReplicationLatency table=pledges eu-west-1->us-east-1 n=1" in out
    assert "replicate_regions: stopped;" in out
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    labels = {"table": "pledges", "source": "eu-west-1", "destination": "us-east-1"}
    assert registry.get_sample_value("dynamo_replication_latency_seconds_count", labels) == 1
