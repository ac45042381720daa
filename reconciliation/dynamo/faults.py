"""Fault injection through botocore's event system (docs/design.md §11).

``FAULT_INJECTION`` is a comma list of ``name=probability``. It is honoured only when
``DJANGO_DEBUG=1`` or ``ALLOW_FAULT_INJECTION=1``; otherwise it is ignored with a
warning. No project code is monkeypatched: faults hook the client's own events, so the
SDK's retry logic and our error handling see exactly what a real failure looks like.

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
- ``slow_task``: ``retry_commit_task`` sleeps ``SLOW_TASK_S`` seconds before it starts,
  so a test can kill the worker process mid-task and watch the broker redeliver it
  (``acks_late`` + ``reject_on_worker_lost``). Nothing else changes.
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
botocore hooks that carry out the rest are in :mod:`reconciliation.dynamo.fault_hooks`.
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
from django.conf import settings

logger = logging.getLogger(__name__)

FAULT_NAMES = (
    "ambiguous_after_commit",
    "ambiguous_no_commit",
    "throttle",
    "crash_after_claim",
    "transaction_conflict",
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
                    logger.warning(
                        "FAULT_INJECTION is set but ignored: it needs DJANGO_DEBUG=1 or "
                        "ALLOW_FAULT_INJECTION=1"
                    )
                else:
                    _plan = FaultPlan(parse_faults(settings.FAULT_INJECTION))
        return _plan


def set_plan(plan: FaultPlan | None) -> None:
    """Use ``plan`` in this process (simulator, drill, tests) whatever the settings say."""
    global _plan, _plan_source
    with _plan_lock:
        _plan = plan
        _plan_source = (settings.FAULT_INJECTION, settings.ALLOW_FAULT_INJECTION)


@contextlib.contextmanager
def injected(plan: FaultPlan | Mapping[str, float]) -> Iterator[FaultPlan]:
    """Use ``plan`` (or a plan of these ``name: probability`` pairs) for the block, then
    none: the simulator, the drill and tests inject faults this way, never by a
    set/unset pair that an exception could leave half done."""
    chosen = plan if isinstance(plan, FaultPlan) else FaultPlan(dict(plan))
    set_plan(chosen)
    try:
        yield chosen
    finally:
        set_plan(None)


def crash_after_claim() -> None:
    plan = active_plan()
    if plan and plan.fires("crash_after_claim"):
        raise SimulatedCrash("crash_after_claim")


SLOW_TASK_S = 3.0


def slow_task(task: str) -> None:
    """Hold up a task's start when ``slow_task`` fires (tests kill the worker meanwhile)."""
    plan = active_plan()
    if plan and plan.fires("slow_task"):
        # The line a test waits for: from here the task is running in a pool process.
        logger.warning("slow_task fault: %s sleeps %.0f s", task, SLOW_TASK_S)
        time.sleep(SLOW_TASK_S)


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
