"""How many DynamoDB round trips a unit of work made, and how long its calls took.

A client hook notes every HTTP request the SDK sends (its own retries included, as
``before-send`` fires once per attempt) and the wall time of each API call, from
``before-call`` to ``after-call`` (backoff between attempts included), in the
:class:`CallTally` the caller opened with :func:`tally` in this thread, or in the thread
that handed the work to a :class:`TalliedPool` (the audit search reads a day's index
shards in one). Nothing is noted outside a tally, so the hook costs a context-variable
read per call when unused. The web edge opens one per request (``dashboard.server_timing``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Where a call's start is kept in botocore's per-call context dictionary.
_STARTED = "reconciliation_call_started"


@dataclass
class CallTally:
    round_trips: int = 0
    calls: int = 0
    seconds: float = 0.0
    # A pool's threads note into their submitter's tally at once: ``+=`` is no atomic step.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def sent(self) -> None:
        with self._lock:
            self.round_trips += 1

    def answered(self, seconds: float) -> None:
        with self._lock:
            self.calls += 1
            self.seconds += seconds


_current: ContextVar[CallTally | None] = ContextVar("dynamodb_call_tally", default=None)


@contextlib.contextmanager
def tally() -> Iterator[CallTally]:
    """Count the DynamoDB calls made inside the block, in this thread."""
    counted = CallTally()
    token = _current.set(counted)
    try:
        yield counted
    finally:
        _current.reset(token)


_P = ParamSpec("_P")
_T = TypeVar("_T")


class TalliedPool(ThreadPoolExecutor):
    """A thread pool whose tasks count their DynamoDB calls in the tally of the thread
    that submitted them (each task runs in a copy of the submitter's context, which
    holds the same :class:`CallTally`): a page that reads in helper threads says every
    call it made."""

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        context = contextvars.copy_context()

        # A closure rather than ``submit(context.run, fn, ...)``: mypy cannot bind the
        # ParamSpec of a generic method passed as the callable.
        def run_in_context() -> _T:
            return context.run(fn, *args, **kwargs)

        return super().submit(run_in_context)


def _on_send(**_kwargs: Any) -> None:
    counted = _current.get()
    if counted is not None:
        counted.sent()


def _on_before_call(context: dict[str, Any] | None = None, **_kwargs: Any) -> None:
    if context is not None and _current.get() is not None:
        context[_STARTED] = time.perf_counter()


def _on_after_call(context: dict[str, Any] | None = None, **_kwargs: Any) -> None:
    counted = _current.get()
    started = context.get(_STARTED) if context is not None else None
    if counted is not None and started is not None:
        counted.answered(time.perf_counter() - started)


def install(client: DynamoDBClient) -> None:
    events = client.meta.events
    events.register("before-send.dynamodb", _on_send)
    # First among the generic before-call handlers. Handlers on an operation's own event
    # run earlier still: a fault that raises there (ambiguous_no_commit) sends nothing,
    # and nothing is counted.
    events.register_first("before-call.dynamodb", _on_before_call)
    events.register("after-call.dynamodb", _on_after_call)
    events.register("after-call-error.dynamodb", _on_after_call)
