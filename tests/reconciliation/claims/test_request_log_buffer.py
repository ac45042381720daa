"""The intake request log's buffer (reconciliation/claims/request_log_buffer.py): the
entries no commit carries wait in a bounded buffer that never blocks an answer, a
background thread writes them in BatchWriteItem requests (what DynamoDB leaves
unprocessed sent again a bounded number of times), and what is left is written when the
process stops (gunicorn's worker_exit, atexit)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reconciliation.claims.request_log import IntakeAnswer, intake_request_new
from reconciliation.claims.request_log_buffer import (
    BATCH,
    RequestLogBuffer,
    intake_request_buffer,
)
from reconciliation.metrics import INTAKE_REQUEST_LOG_DROPPED, INTAKE_REQUEST_LOG_FAILED
from reconciliation.stores import Store
from tests.helpers import AS_SYSTEM, scan_all

ROOT = Path(__file__).resolve().parents[3]


def entry(key: str, status: int = 200):
    return intake_request_new(
        tenant="acme",
        idempotency_key=key,
        answer=IntakeAnswer(status=status, outcome="replayed", rejected=False, replayed=True),
        correlation_id=f"corr-{key}",
    )


def logged_keys(ddb) -> list[str]:
    return sorted(i["idempotency_key"] for i in scan_all(ddb, ddb.tables.requests))


class Calls:
    """The BatchWriteItem requests a client sends (items in each), and the answers it
    got: a test waits for those rather than reading the table while the flusher writes
    (moto's in-process engine is not safe for that)."""

    def __init__(self, client):
        self.batches: list[int] = []
        self.answered = threading.Semaphore(0)
        events = client.meta.events
        events.register("provide-client-params.dynamodb.BatchWriteItem", self._seen)
        events.register("after-call.dynamodb.BatchWriteItem", self._answered)

    def _seen(self, params, **_kwargs):
        self.batches.append(sum(len(v) for v in params["RequestItems"].values()))

    def _answered(self, **_kwargs):
        self.answered.release()

    def wait(self, answers: int = 1) -> None:
        for _ in range(answers):
            assert self.answered.acquire(timeout=10), "not written in time"


class Unprocessing:
    """A client that leaves items of a BatchWriteItem unprocessed, as DynamoDB does when
    it throttles some: the first ``times`` requests write only their first item (none
    when ``times`` is -1: every request leaves everything) and hand the rest back."""

    def __init__(self, real, times: int):
        self.real = real
        self.times = times
        self.requests = 0

    def batch_write_item(self, RequestItems):  # noqa: N803 - boto3's own name
        self.requests += 1
        if self.times != -1 and self.requests > self.times:
            return self.real.batch_write_item(RequestItems=RequestItems)
        [(table, requests)] = RequestItems.items()
        if self.times == -1:
            return {"UnprocessedItems": {table: requests}}
        self.real.batch_write_item(RequestItems={table: requests[:1]})
        rest = requests[1:]
        return {"UnprocessedItems": {table: rest} if rest else {}}

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_full_buffer_drops_its_oldest_entries_and_counts_them(ddb):
    """Five entries into a buffer of three: the two oldest are dropped and counted, the
    three newest are what a flush writes."""
    buffer = RequestLogBuffer(capacity=3, interval_s=0)
    dropped = INTAKE_REQUEST_LOG_DROPPED._value.get()
    for n in range(5):
        buffer.add(entry(f"full-{n}"), store=AS_SYSTEM.store)
    assert len(buffer) == 3
    assert INTAKE_REQUEST_LOG_DROPPED._value.get() == dropped + 2
    report = buffer.flush()
    assert (report.written, report.failed) == (3, 0)
    assert logged_keys(ddb) == ["full-2", "full-3", "full-4"]
    assert len(buffer) == 0


def test_adding_never_waits_for_a_stalled_write(ddb):
    """The flusher is stuck in a write that DynamoDB does not answer: answers keep adding
    their entries without waiting (a hundred in well under a second), the buffer stays
    within its bound, dropping the oldest, and everything still buffered is written once
    DynamoDB answers again."""
    release = threading.Event()
    stuck = threading.Event()
    real = AS_SYSTEM.store.client

    class Stalled:
        def batch_write_item(self, RequestItems):  # noqa: N803 - boto3's own name
            stuck.set()
            release.wait(30)
            return real.batch_write_item(RequestItems=RequestItems)

        def __getattr__(self, name):
            return getattr(real, name)

    store = Store(Stalled(), ddb.tables)
    buffer = RequestLogBuffer(capacity=40, interval_s=0.01)
    try:
        buffer.add(entry("stall-first"), store=store)
        assert stuck.wait(10)  # the thread holds that entry in a write that hangs
        started = time.monotonic()
        for n in range(100):
            buffer.add(entry(f"stall-{n:03}"), store=store)
        assert time.monotonic() - started < 0.5
        assert len(buffer) == 40
    finally:
        release.set()
        buffer.close()
    assert logged_keys(ddb) == [*[f"stall-{n:03}" for n in range(60, 100)], "stall-first"]


def test_the_flusher_writes_in_the_background_in_one_batch(ddb):
    """Three entries, a flusher every 50 ms: they are written without anyone flushing, in
    one BatchWriteItem."""
    calls = Calls(AS_SYSTEM.store.client)
    buffer = RequestLogBuffer(capacity=100, interval_s=0.05)
    try:
        for n in range(3):
            buffer.add(entry(f"bg-{n}"), store=AS_SYSTEM.store)
        assert buffer.running
        calls.wait()
    finally:
        buffer.close()
    assert not buffer.running
    assert calls.batches == [3]
    assert logged_keys(ddb) == ["bg-0", "bg-1", "bg-2"]


def test_a_full_batch_is_written_before_the_interval(ddb):
    """A flusher that would wait a minute writes as soon as a batch's worth (25) waits."""
    calls = Calls(AS_SYSTEM.store.client)
    buffer = RequestLogBuffer(capacity=100, interval_s=60)
    try:
        for n in range(BATCH):
            buffer.add(entry(f"batch-{n:02}"), store=AS_SYSTEM.store)
        calls.wait()
        assert len(buffer) == 0  # written by the flusher, long before its minute
    finally:
        buffer.close()
    assert calls.batches == [BATCH]
    assert len(logged_keys(ddb)) == BATCH


def test_close_writes_what_is_left_and_stops_the_flusher(ddb):
    """A flusher that would wait a minute: closing it (the process stopping) writes the
    two entries waiting and stops the thread."""
    buffer = RequestLogBuffer(capacity=100, interval_s=60)
    for n in range(2):
        buffer.add(entry(f"close-{n}"), store=AS_SYSTEM.store)
    assert buffer.running
    report = buffer.close()
    assert (report.written, report.failed) == (2, 0)
    assert not buffer.running
    assert logged_keys(ddb) == ["close-0", "close-1"]


def test_a_flush_sends_at_most_25_items_a_request(ddb):
    """27 entries are two BatchWriteItem requests, of 25 and 2 (DynamoDB's limit)."""
    calls = Calls(AS_SYSTEM.store.client)
    buffer = RequestLogBuffer(capacity=100, interval_s=0)
    for n in range(BATCH + 2):
        buffer.add(entry(f"limit-{n:02}"), store=AS_SYSTEM.store)
    assert buffer.flush().written == BATCH + 2
    assert calls.batches == [BATCH, 2]
    assert len(logged_keys(ddb)) == BATCH + 2


def test_gunicorn_worker_exit_writes_what_the_worker_buffered(ddb, request_log_buffer_isolated):
    """The gunicorn hook run in a worker as it exits writes the process's buffered
    entries."""
    from dashboard import gunicorn_conf

    intake_request_buffer(entry("exit-1"), store=AS_SYSTEM.store)
    gunicorn_conf.worker_exit(None, None)
    assert logged_keys(ddb) == ["exit-1"]
    assert len(request_log_buffer_isolated) == 0


@pytest.mark.dynamodb_local_only  # a second process reaches the same engine
def test_a_process_that_exits_writes_what_it_buffered(ddb, tmp_path):
    """A process buffers an entry, its flusher set to wait a minute, and exits without
    flushing: atexit writes it."""
    script = (
        "import django; django.setup()\n"
        "from reconciliation.claims.request_log import IntakeAnswer, intake_request_new\n"
        "from reconciliation.claims.request_log_buffer import intake_request_buffer\n"
        "from reconciliation.stores import first_store\n"
        "intake_request_buffer(intake_request_new(tenant='acme', idempotency_key='atexit-1',"
        " answer=IntakeAnswer(status=200, outcome='replayed', rejected=False, replayed=True)),"
        " store=first_store())\n"
        "print('buffered')\n"
    )
    env = dict(os.environ)
    env.pop("FAULT_INJECTION", None)
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        VAR_DIR=str(tmp_path),
        DYNAMODB_ENDPOINT_URL=ddb.endpoint_url,
        DDB_TABLE_PREFIX=ddb.tables.requests.removesuffix("requests"),
        DDB_REGIONS="",
        DDB_PRIMARY_REGION="",
        REQUEST_LOG_FLUSH_S="60",
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "buffered"
    assert logged_keys(ddb) == ["atexit-1"]


def test_unprocessed_items_are_sent_again(ddb):
    """DynamoDB leaves all but the first item of a batch unprocessed twice: the rest is
    sent again after a short backoff until all three are written, in three requests."""
    client = Unprocessing(AS_SYSTEM.store.client, times=2)
    sleeps: list[float] = []
    buffer = RequestLogBuffer(capacity=100, interval_s=0, sleep=sleeps.append)
    for n in range(3):
        buffer.add(entry(f"unproc-{n}"), store=Store(client, ddb.tables))
    report = buffer.flush()
    assert (report.written, report.failed) == (3, 0)
    assert client.requests == 3
    assert sleeps == [0.05, 0.1]
    assert logged_keys(ddb) == ["unproc-0", "unproc-1", "unproc-2"]


def test_unprocessed_items_are_given_up_after_a_bounded_number_of_requests(ddb):
    """DynamoDB never processes a batch: after 4 requests (the first and 3 more) its
    entries are given up, counted as UnprocessedItems failures, and the buffer is empty:
    nothing is retried for ever, and nothing waits in memory for it."""
    client = Unprocessing(AS_SYSTEM.store.client, times=-1)
    sleeps: list[float] = []
    buffer = RequestLogBuffer(capacity=100, interval_s=0, sleep=sleeps.append)
    counted = INTAKE_REQUEST_LOG_FAILED.labels("UnprocessedItems")
    before = counted._value.get()
    for n in range(3):
        buffer.add(entry(f"never-{n}"), store=Store(client, ddb.tables))
    report = buffer.flush()
    assert (report.written, report.failed) == (0, 3)
    assert client.requests == 4
    assert sleeps == [0.05, 0.1, 0.2]
    assert counted._value.get() == before + 3
    assert len(buffer) == 0 and logged_keys(ddb) == []
    assert buffer.flush().written == 0 and client.requests == 4


def test_no_answer_from_dynamodb_ends_the_flush(ddb):
    """DynamoDB cannot be reached: the first batch's request fails without an answer, and
    the flush gives up on the second batch too instead of waiting out the same timeouts
    again (a process stopping must not hang on its log); all 30 entries are counted."""
    from botocore.exceptions import EndpointConnectionError

    class Unreachable:
        requests = 0

        def batch_write_item(self, RequestItems):  # noqa: N803 - boto3's own name
            self.requests += 1
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    client = Unreachable()
    buffer = RequestLogBuffer(capacity=100, interval_s=0)
    counted = INTAKE_REQUEST_LOG_FAILED.labels("EndpointConnectionError")
    before = counted._value.get()
    for n in range(BATCH + 5):
        buffer.add(entry(f"gone-{n:02}"), store=Store(client, ddb.tables))
    report = buffer.flush()
    assert (report.written, report.failed) == (0, BATCH + 5)
    assert client.requests == 1
    assert counted._value.get() == before + BATCH + 5
    assert len(buffer) == 0


@pytest.mark.dynamodb_local_only  # two regions are two DynamoDB Local engines
def test_each_entry_is_written_in_its_own_region(two_regions):
    """Entries for keys homed in two regions: each region's table gets its own, by one
    BatchWriteItem on that region's client."""
    from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
    from reconciliation.stores import every_store, home_store

    keys = {}
    for n in range(40):
        key = f"region-{n}"
        keys.setdefault(home_store(claim_pk("acme", OPERATION_CREATE_PLEDGE, key)).tag, key)
        if len(keys) == 2:
            break
    buffer = RequestLogBuffer(capacity=100, interval_s=0)
    for key in keys.values():
        buffer.add(entry(key), store=home_store(claim_pk("acme", OPERATION_CREATE_PLEDGE, key)))
    assert buffer.flush().written == 2
    for store in every_store():
        items = store.client.scan(TableName=store.tables.requests)["Items"]
        assert [i["idempotency_key"]["S"] for i in items] == [keys[store.tag]]
