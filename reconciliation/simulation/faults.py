"""Fault injection through botocore's event system (docs/design.md §11).

``FAULT_INJECTION`` is a comma list of ``name=probability``. It is honoured only when
``DJANGO_DEBUG=1`` or ``ALLOW_FAULT_INJECTION=1``; otherwise it is ignored with a
warning. No project code is monkeypatched: faults hook the client's own events, so the
SDK's retry logic and our error handling see exactly what a real failure looks like.

Where faults run (a :class:`FaultScope` each): nowhere in a production process, whose
shared clients carry no fault hook and whose tasks none either. The clients built for
injecting faults (``fault_hooks.fault_injecting_client``: the drill's, the simulator's)
carry the hooks and consult a scope of their own, so their faults never reach the
traffic beside them. A process started with ``FAULT_INJECTION`` where it is allowed (the
demos, the faulty servers of the reliability checks) builds every client with the hooks,
consulting :data:`PROCESS_FAULTS`: the settings' plan, or the one :func:`injected` sets.

- ``throttle``: a ``ThrottlingException`` answer in place of the HTTP call (the SDK's
  standard retry mode sees it and retries, then the application's own backoff does).
- ``ambiguous_after_commit``: ``TransactWriteItems`` really runs, then a read timeout is
  raised, so nobody knows whether it committed.
- ``crash_after_claim``: the request stops between claim and commit, without cleanup,
  as if the worker died (:class:`SimulatedCrash`).
- ``ambiguous_no_commit``: the pledge commit never reaches DynamoDB, yet the caller sees
  a read timeout after the SDK's retries: the same doubt as above, but nothing committed,
  so the case needs a person (retry the commit or release the claim).
- ``transaction_conflict``: ``TransactWriteItems`` is cancelled with a
  ``TransactionConflict`` reason on the ledger item, as a hot fund does on AWS
  (DynamoDB Local never raises it by itself).
- ``cancelled_throttled``: the pledge commit is cancelled
  (``TransactionCanceledException``) with a ``ThrottlingError`` reason on the ledger item,
  as AWS cancels a transaction whose item is throttled; nothing reaches the engine.
- ``slow_task``: ``retry_commit_task`` sleeps ``SLOW_TASK_S`` seconds before it starts,
  so a test can kill the worker process mid-task and watch the broker redeliver it
  (``acks_late`` + ``reject_on_worker_lost``). Nothing else changes. A Celery signal
  carries it, connected only where ``FAULT_INJECTION`` is configured (:func:`task_faults_install`).
- ``internal_error_after_commit``: the pledge commit is really sent to DynamoDB (it
  applies, unless the engine itself refuses it; its real answer is dropped), yet the
  caller gets HTTP 500 ``InternalServerError``, to it and to every retry of it (same
  ``ClientRequestToken``, never sent again): the SDK's and the application's retries all
  see 500.
- ``ambiguous_then_throttle``: the pledge commit is really sent (and applies, as above),
  its response is lost (``ConnectionClosedError``), and every retry of it (same token) is
  answered ``ThrottlingException``: a definite-looking refusal of something that applied.
- ``case_write_fails``: every write to the cases table (``PutItem``, ``UpdateItem``,
  ``DeleteItem``, ``BatchWriteItem`` on it, and any ``TransactWriteItems`` with an item
  on it) is answered ``ThrottlingException``; nothing reaches the engine.
- ``access_denied``: every call is answered ``AccessDeniedException`` (HTTP 400), as with
  an IAM policy that does not allow it; nothing reaches the engine.

Every fault draws its probability on each call it applies to. ``internal_error_after_commit``
and ``ambiguous_then_throttle`` draw on each send of a pledge commit that neither has
taken yet; once one takes a commit (a ``ClientRequestToken``) it answers every retry of
that token, in this plan, whatever the probability. Faults that answer at the HTTP layer
(all but ``crash_after_claim``, ``slow_task`` and the two ``ambiguous_*_commit``) need an
engine reached over HTTP (DynamoDB Local, AWS): an in-process stub such as moto applies
every request it sees whatever the fault answers.

This module holds the vocabulary, the plan and the faults raised in our own code; the
botocore hooks that carry out the rest are in :mod:`reconciliation.simulation.fault_hooks`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from celery import signals
from django.conf import settings

from reconciliation.dynamo.client_hooks import warn_ignored

logger = logging.getLogger(__name__)

FAULT_NAMES = (
    "ambiguous_after_commit",
    "ambiguous_no_commit",
    "throttle",
    "crash_after_claim",
    "transaction_conflict",
    "cancelled_throttled",
    "slow_task",
    "internal_error_after_commit",
    "ambiguous_then_throttle",
    "case_write_fails",
    "access_denied",
)
# The faults that apply the pledge commit and then answer for it, and every retry of it.
COMMIT_FAULTS = ("internal_error_after_commit", "ambiguous_then_throttle")
ALIASES = {
    "ambiguous": "ambiguous_after_commit",
    "crash": "crash_after_claim",
    "conflict": "transaction_conflict",
}


class SimulatedCrash(BaseException):
    """The worker 'dies' here. A BaseException so no ``except Exception`` cleans up."""


def parse_faults(spec: str) -> dict[str, float]:
    """Parse ``name=probability,...``; raise ``ValueError`` naming what is wrong."""
    faults: dict[str, float] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = ALIASES.get(name.strip(), name.strip())
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULT_NAMES)}")
        try:
            probability = float(value) if sep else 1.0
        except ValueError:
            raise ValueError(f"fault {name}: probability {value!r} is not a number") from None
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"fault {name}: probability must be between 0 and 1")
        faults[name] = probability
    return faults


@dataclass
class FaultPlan:
    probabilities: dict[str, float]
    rng: random.Random = field(default_factory=random.Random)
    counts: dict[str, int] = field(default_factory=dict)
    conflicted: set[str] = field(default_factory=set)
    # ClientRequestToken -> the commit fault that applied that commit and now answers
    # for every retry of it.
    commit_tokens: dict[str, str] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def fires(self, name: str) -> bool:
        p = self.probabilities.get(name, 0.0)
        if p <= 0.0:
            return False
        with self._lock:
            hit = self.rng.random() < p
            if hit:
                self.counts[name] = self.counts.get(name, 0) + 1
        return hit

    def take_commit(self, token: str) -> tuple[str | None, bool]:
        """The commit fault that takes the commit sent under ``token`` (or ``None``), and
        whether this is its first send. Once a fault has taken a token it keeps it for
        every retry; a send that no fault took draws again on its retry. Atomic, so
        concurrent sends of one token agree on both."""
        with self._lock:
            taken = self.commit_tokens.get(token) if token else None
            if taken is not None:
                return taken, False
            taken = next((name for name in COMMIT_FAULTS if self.fires(name)), None)
            if taken is not None and token:
                self.commit_tokens[token] = taken
            return taken, taken is not None


_plan: FaultPlan | None = None
_plan_source: tuple[str, bool] | None = None
_plan_lock = threading.Lock()


def configured() -> bool:
    """Whether this process injects faults on every client: ``FAULT_INJECTION`` set where
    it is allowed (``DJANGO_DEBUG=1`` or ``ALLOW_FAULT_INJECTION=1``)."""
    return bool(settings.ALLOW_FAULT_INJECTION and (settings.FAULT_INJECTION or "").strip())


def active_plan() -> FaultPlan | None:
    """The plan from settings, or ``None`` when fault injection is off or not allowed."""
    global _plan, _plan_source
    source = (settings.FAULT_INJECTION, settings.ALLOW_FAULT_INJECTION)
    with _plan_lock:
        if source != _plan_source:
            _plan_source = source
            _plan = None
            if settings.FAULT_INJECTION:
                if not settings.ALLOW_FAULT_INJECTION:
                    warn_ignored()
                else:
                    _plan = FaultPlan(parse_faults(settings.FAULT_INJECTION))
        return _plan


def set_plan(plan: FaultPlan | None) -> None:
    """Use ``plan`` in this process (tests) whatever the settings say. Only clients built
    with the process's faults consult it: every client where fault injection is
    configured, none in production."""
    global _plan, _plan_source
    with _plan_lock:
        _plan = plan
        _plan_source = (settings.FAULT_INJECTION, settings.ALLOW_FAULT_INJECTION)


def _chosen(plan: FaultPlan | Mapping[str, float]) -> FaultPlan:
    return plan if isinstance(plan, FaultPlan) else FaultPlan(dict(plan))


@contextlib.contextmanager
def injected(plan: FaultPlan | Mapping[str, float]) -> Iterator[FaultPlan]:
    """Use ``plan`` (or a plan of these ``name: probability`` pairs) as the process's plan
    for the block, then none: never by a set/unset pair that an exception could leave half
    done. The drill and the simulator use a scope of their own instead
    (:meth:`FaultScope.injected`)."""
    chosen = _chosen(plan)
    set_plan(chosen)
    try:
        yield chosen
    finally:
        set_plan(None)


class FaultScope:
    """Where a fault-injecting client's hooks, and the faults raised in our own code
    (:meth:`crash_after_claim`), find their plan: one of their own, set for a block with
    :meth:`injected` (the drill's, the simulator's), so their faults reach only the calls
    made on their own clients and stores."""

    def __init__(self) -> None:
        self._own: FaultPlan | None = None

    def plan(self) -> FaultPlan | None:
        return self._own

    @contextlib.contextmanager
    def injected(self, plan: FaultPlan | Mapping[str, float]) -> Iterator[FaultPlan]:
        """Use ``plan`` in this scope for the block, then none."""
        chosen = _chosen(plan)
        self._own = chosen
        try:
            yield chosen
        finally:
            self._own = None

    def crash_after_claim(self) -> None:
        """The worker 'dies' here, between claim and commit, when the plan says so."""
        plan = self.plan()
        if plan and plan.fires("crash_after_claim"):
            raise SimulatedCrash("crash_after_claim")


class _ProcessFaults(FaultScope):
    """The process's faults: the settings' plan, or the one :func:`set_plan` set."""

    def plan(self) -> FaultPlan | None:
        return active_plan()

    @contextlib.contextmanager
    def injected(self, plan: FaultPlan | Mapping[str, float]) -> Iterator[FaultPlan]:
        with injected(plan) as chosen:
            yield chosen


# Consulted by every client of a process where fault injection is configured.
PROCESS_FAULTS: FaultScope = _ProcessFaults()


def process_faults() -> FaultScope | None:
    """The scope the shared clients and stores of this process carry: :data:`PROCESS_FAULTS`
    where fault injection is configured, else ``None``: nothing of fault injection runs."""
    return PROCESS_FAULTS if configured() else None


SLOW_TASK_S = 3.0
# The task hook's dispatch uid: connected once, however often installed.
TASK_FAULTS_UID = "reconciliation.simulation.faults.slow_task"


def slow_task(task: str) -> None:
    """Hold up a task's start when ``slow_task`` fires (tests kill the worker meanwhile)."""
    plan = active_plan()
    if plan and plan.fires("slow_task"):
        # The line a test waits for: from here the task is running in a pool process.
        logger.warning("slow_task fault: %s sleeps %.0f s", task, SLOW_TASK_S)
        time.sleep(SLOW_TASK_S)


def task_faults_install(slow: frozenset[str]) -> None:
    """Where fault injection is configured, hold up the start of the tasks named in
    ``slow`` when ``slow_task`` fires (Celery's ``task_prerun``, in the process that runs
    the task). Elsewhere nothing is connected: a production task runs no fault code."""
    if not configured():
        if (settings.FAULT_INJECTION or "").strip():
            warn_ignored()
        return

    def before_task(sender: Any = None, **_kwargs: Any) -> None:
        name = getattr(sender, "name", "")
        if name in slow:
            slow_task(name)

    signals.task_prerun.connect(before_task, weak=False, dispatch_uid=TASK_FAULTS_UID)


class _Body:
    def __init__(self, data: bytes):
        self._data = data

    def stream(self, **_kwargs: Any) -> Iterator[bytes]:
        yield self._data


def error_response(
    request: AWSPreparedRequest, status: int, error_type: str, message: str, **extra: Any
) -> AWSResponse:
    """An error answer as DynamoDB sends it, in place of the HTTP call (``before-send``)."""
    body = json.dumps({"__type": error_type, "message": message, **extra}).encode()
    return AWSResponse(request.url, status, {"x-amzn-requestid": "fault-injection"}, _Body(body))
