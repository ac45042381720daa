"""The intake request log's entries that no transaction carries, written off the request
path (docs/design.md §3, "The intake request log").

A new pledge's entry travels in its commit (:func:`~reconciliation.claims.request_log.
intake_request_of_commit`). Every other answer — a replay, a refusal (4xx), 409, 202, 503,
a lookup — hands its entry to this process's :class:`RequestLogBuffer` and is sent at
once: the answer costs no round trip for its log. A background thread writes what is
buffered every ``REQUEST_LOG_FLUSH_S`` seconds, sooner when a batch's worth is waiting,
as ``BatchWriteItem`` requests of up to 25 items per region; ``UnprocessedItems`` (what
DynamoDB throttled) are sent again, at most :data:`BATCH_ROUNDS` requests per batch, and
what is still unprocessed then is counted and dropped.

Bounded, never blocking: the buffer holds at most ``REQUEST_LOG_BUFFER`` entries, and a
full buffer drops its oldest entry, counted in ``intake_request_log_dropped_total``. A
failed write is counted in ``intake_request_log_failures_total{code}`` and the process's
first one is logged (a missing table would otherwise log every flush). The answer never
depends on any of it.

The buffer is flushed when its process stops: gunicorn's ``worker_exit`` hook
(``dashboard/gunicorn_conf.py``) and ``atexit`` both call :func:`request_log_close`. A
process killed outright (SIGKILL, out of memory, the machine lost) loses what it had
buffered since its last write: about ``REQUEST_LOG_FLUSH_S`` seconds of its answers while
DynamoDB answers promptly, at most ``REQUEST_LOG_BUFFER`` entries while a write hangs, and
never a 201's, which is written with its pledge. That is acceptable for this log: nothing decides
anything from it, and what it records of money is recorded durably elsewhere (the pledge,
its receipt in the audit trail, the case an unclear answer opened).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation.claims.request_log import IntakeRequest, request_log_item
from reconciliation.dynamo.errors import DYNAMO_ERROR_CODE
from reconciliation.metrics import INTAKE_REQUEST_LOG_DROPPED, INTAKE_REQUEST_LOG_FAILED

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.stores import Store

logger = logging.getLogger(__name__)

BATCH = 25  # DynamoDB's limit of items per BatchWriteItem request
# Requests per batch: the first and up to three more for what DynamoDB left unprocessed.
BATCH_ROUNDS = 4
# How long the flusher waits for its last round when its process stops.
CLOSE_WAIT_S = 5.0


@dataclass(frozen=True)
class _Buffered:
    store: Store  # the region the entry belongs in (the key's home; keyless: the first)
    item: dict[str, AttributeValueTypeDef]


@dataclass(frozen=True)
class FlushReport:
    """What one flush did: entries written, and entries given up (counted by code)."""

    written: int = 0
    failed: int = 0

    def __add__(self, other: FlushReport) -> FlushReport:
        return FlushReport(self.written + other.written, self.failed + other.failed)


class _WriteAbandoned(Exception):
    """DynamoDB gave no answer: the rest of this flush would wait out the same timeouts."""

    def __init__(self, code: str, unwritten: int):
        super().__init__(code)
        self.code = code
        self.unwritten = unwritten


_first_failure_logged = threading.Event()


def _failed(code: str, count: int) -> None:
    INTAKE_REQUEST_LOG_FAILED.labels(code).inc(count)
    if not _first_failure_logged.is_set():
        _first_failure_logged.set()
        logger.warning(
            "intake request log write failed (%s); counted from now on in "
            "intake_request_log_failures_total, not logged again",
            code,
            extra={DYNAMO_ERROR_CODE: code},
        )


class RequestLogBuffer:
    """A bounded buffer of log entries and the thread that writes them.

    ``interval_s`` > 0 starts the thread with the first entry; 0 starts none, and only
    :meth:`flush` and :meth:`close` write (the fault explorer, whose calls must all be
    its own, and the tests, which flush when they look)."""

    def __init__(
        self,
        *,
        capacity: int,
        interval_s: float,
        rounds: int = BATCH_ROUNDS,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.capacity = max(1, capacity)
        self.interval_s = interval_s
        self.rounds = max(1, rounds)
        self._sleep = sleep
        self._entries: deque[_Buffered] = deque()
        self._lock = threading.Lock()  # the deque and the thread's start
        # One flush at a time, so a flush returns only once what was taken before it
        # (by the thread, say) has been written too.
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def add(self, entry: IntakeRequest, *, store: Store) -> None:
        """Buffer ``entry`` for ``store``'s table. Never waits for DynamoDB: a full buffer
        drops its oldest entry instead (counted)."""
        buffered = _Buffered(store, request_log_item(entry))
        with self._lock:
            if len(self._entries) >= self.capacity:
                self._entries.popleft()
                INTAKE_REQUEST_LOG_DROPPED.inc()
            self._entries.append(buffered)
            batch_waiting = len(self._entries) >= BATCH
            self._start()
        if batch_waiting:
            self._wake.set()

    def flush(self) -> FlushReport:
        """Write everything buffered now, in batches; what cannot be written is counted
        and dropped (a log entry is not worth holding a process's memory)."""
        with self._flushing:
            with self._lock:
                taken = list(self._entries)
                self._entries.clear()
            return _write(taken, rounds=self.rounds, sleep=self._sleep)

    def close(self) -> FlushReport:
        """Stop the thread and write what is left: the process is stopping. Safe to call
        more than once; an entry added after it is written by the next flush or close."""
        self.stop()
        return self.flush()

    def stop(self) -> None:
        """Stop the thread (after its flush under way, if any); write nothing more."""
        self._closed.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)
        atexit.unregister(self.close)

    def discard(self) -> int:
        """Drop what is buffered, unwritten; how many were dropped. For a buffer whose
        tables are about to go (a test's, an explorer worker's between scenarios)."""
        with self._flushing, self._lock:
            dropped = len(self._entries)
            self._entries.clear()
        return dropped

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _start(self) -> None:
        """Start the flusher (under ``_lock``), unless there is to be none or it runs."""
        if self.interval_s <= 0 or self._closed.is_set() or self.running:
            return
        self._thread = threading.Thread(target=self._run, name="request-log-flush", daemon=True)
        self._thread.start()
        # A daemon thread dies with the interpreter: the last entries are written here.
        atexit.register(self.close)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._closed.is_set():
                return  # close() writes what is left
            try:
                self.flush()
            except Exception:  # the flusher outlives any one bad flush
                logger.exception("intake request log flush failed")


def _write(entries: list[_Buffered], *, rounds: int, sleep: Callable[[float], None]) -> FlushReport:
    """``entries`` grouped by region, 25 a request."""
    groups: dict[tuple[int, str], tuple[Store, list[dict[str, AttributeValueTypeDef]]]] = {}
    for entry in entries:
        key = (id(entry.store.client), entry.store.tables.requests)
        groups.setdefault(key, (entry.store, []))[1].append(entry.item)
    report = FlushReport()
    chunks = [
        (store, items[start : start + BATCH])
        for store, items in groups.values()
        for start in range(0, len(items), BATCH)
    ]
    for n, (store, chunk) in enumerate(chunks):
        try:
            report += _write_batch(store, chunk, rounds=rounds, sleep=sleep)
        except _WriteAbandoned as exc:
            left = sum(len(c) for _, c in chunks[n + 1 :])
            if left:
                _failed(exc.code, left)
            written = len(chunk) - exc.unwritten
            return report + FlushReport(written=written, failed=exc.unwritten + left)
    return report


def _write_batch(
    store: Store,
    items: list[dict[str, AttributeValueTypeDef]],
    *,
    rounds: int,
    sleep: Callable[[float], None],
) -> FlushReport:
    """One batch: sent, then what DynamoDB left unprocessed sent again after a capped
    backoff, ``rounds`` requests at most."""
    table = store.tables.requests
    pending: dict[str, Any] = {table: [{"PutRequest": {"Item": item}} for item in items]}
    for attempt in range(rounds):
        if attempt:
            sleep(min(0.05 * 2 ** (attempt - 1), 1.0))
        try:
            response = store.client.batch_write_item(RequestItems=pending)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "ClientError")
            written = len(items) - _count(pending)
            _failed(code, _count(pending))
            return FlushReport(written=written, failed=_count(pending))
        except BotoCoreError as exc:
            _failed(type(exc).__name__, _count(pending))
            raise _WriteAbandoned(type(exc).__name__, _count(pending)) from exc
        pending = dict(response.get("UnprocessedItems") or {})
        if not pending:
            return FlushReport(written=len(items))
    left = _count(pending)
    _failed("UnprocessedItems", left)
    return FlushReport(written=len(items) - left, failed=left)


def _count(request_items: dict[str, Any]) -> int:
    return sum(len(requests) for requests in request_items.values())


# --- the process's buffer ----------------------------------------------------------------


class _Process:
    """This process's one buffer, made on first use from the settings."""

    lock = threading.Lock()
    buffer: RequestLogBuffer | None = None


def request_log_buffer() -> RequestLogBuffer:
    with _Process.lock:
        if _Process.buffer is None:
            _Process.buffer = RequestLogBuffer(
                capacity=int(settings.REQUEST_LOG_BUFFER),
                interval_s=float(settings.REQUEST_LOG_FLUSH_S),
            )
        return _Process.buffer


def intake_request_buffer(entry: IntakeRequest, *, store: Store) -> None:
    """Log ``entry`` (an answer no transaction carries) off the request path."""
    request_log_buffer().add(entry, store=store)


def request_log_flush() -> FlushReport:
    """Write what this process has buffered, now."""
    return request_log_buffer().flush()


def request_log_close() -> FlushReport:
    """The process is stopping: stop its flusher and write what is left."""
    with _Process.lock:
        buffer = _Process.buffer
    return buffer.close() if buffer is not None else FlushReport()


@contextlib.contextmanager
def request_log_buffered(buffer: RequestLogBuffer) -> Iterator[RequestLogBuffer]:
    """``buffer`` as this process's for the block, and the one before it back afterwards;
    what is left in it at the end is discarded, unwritten: for a worker of the fault
    explorer and for the tests, whose tables go with them."""
    with _Process.lock:
        before, _Process.buffer = _Process.buffer, buffer
    try:
        yield buffer
    finally:
        buffer.stop()
        buffer.discard()
        with _Process.lock:
            _Process.buffer = before


def _forget_after_fork() -> None:
    """A forked child starts with no buffer: the parent's entries and thread are the
    parent's to write (a thread does not survive a fork, and the entries would be
    written twice)."""
    _Process.lock = threading.Lock()
    _Process.buffer = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
