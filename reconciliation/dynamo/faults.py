"""Fault injection through botocore's event system (DESIGN.md §8).

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
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
from botocore.httpsession import URLLib3Session
from django.conf import settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

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
_plan_source: tuple | None = None
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

    def stream(self, **_kwargs) -> Iterator[bytes]:
        yield self._data


def error_response(request, status: int, error_type: str, message: str, **extra) -> AWSResponse:
    """An error answer as DynamoDB sends it, in place of the HTTP call (``before-send``)."""
    body = json.dumps({"__type": error_type, "message": message, **extra}).encode()
    return AWSResponse(request.url, status, {"x-amzn-requestid": "fault-injection"}, _Body(body))


THROTTLING = "com.amazonaws.dynamodb.v20120810#ThrottlingException"
INTERNAL_ERROR = "com.amazonaws.dynamodb.v20120810#InternalServerError"
ACCESS_DENIED = "com.amazon.coral.service#AccessDeniedException"
SINGLE_WRITES = ("PutItem", "UpdateItem", "DeleteItem")
TRANSACT_OPERATIONS = ("Put", "Update", "Delete", "ConditionCheck")

_session: URLLib3Session | None = None
_session_lock = threading.Lock()


def _send_for_real(request) -> int:
    """Send ``request`` to the engine past every hook; return the status it answered."""
    global _session
    with _session_lock:
        if _session is None:
            _session = URLLib3Session()
        session = _session
    return session.send(request).status_code


def _throttled(request) -> AWSResponse:
    return error_response(
        request, 400, THROTTLING, "Rate of requests exceeds the allowed throughput (injected)"
    )


def _operation(request) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    if isinstance(target, bytes):
        target = target.decode()
    return target.rpartition(".")[2]


def _is_cases_table(name: str) -> bool:
    return name.endswith("cases")


def _writes_cases(operation: str, body: dict) -> bool:
    if operation in SINGLE_WRITES:
        return _is_cases_table(body.get("TableName", ""))
    if operation == "BatchWriteItem":
        return any(_is_cases_table(name) for name in body.get("RequestItems", {}))
    if operation == "TransactWriteItems":
        return any(
            _is_cases_table(item[kind].get("TableName", ""))
            for item in body.get("TransactItems", [])
            for kind in TRANSACT_OPERATIONS
            if kind in item
        )
    return False


def _is_pledge_commit(items: list[dict]) -> bool:
    return any(
        "Put" in item and item["Put"].get("TableName", "").endswith("pledges") for item in items
    )


def _commit_fault(plan: FaultPlan, request, token: str) -> AWSResponse | None:
    """``internal_error_after_commit`` / ``ambiguous_then_throttle`` on a pledge commit."""
    name, first = plan.take_commit(token)
    if name is None:
        return None
    if first:
        # The first send of this commit reaches the engine and applies; only what comes
        # back is faulty.
        status = _send_for_real(request)
        logger.warning("%s fault: the commit was sent (engine answered %s)", name, status)
    if name == "internal_error_after_commit":
        return error_response(
            request, 500, INTERNAL_ERROR, "Internal server error (injected after commit)"
        )
    if first:
        raise ConnectionClosedError(endpoint_url=request.url)
    return _throttled(request)


def _on_before_send(request, **kwargs) -> AWSResponse | None:
    plan = active_plan()
    if plan is None:
        return None
    if plan.fires("access_denied"):
        return error_response(
            request,
            400,
            ACCESS_DENIED,
            "User is not authorized to perform this action on this resource (injected)",
        )
    if plan.fires("throttle"):
        return _throttled(request)
    operation = _operation(request)
    watched = plan.probabilities.get("case_write_fails") or (
        operation == "TransactWriteItems"
        and any(plan.probabilities.get(name) for name in (*COMMIT_FAULTS, "transaction_conflict"))
    )
    if not watched:
        return None
    body = json.loads(request.body or b"{}")
    if _writes_cases(operation, body) and plan.fires("case_write_fails"):
        return _throttled(request)
    if operation != "TransactWriteItems":
        return None
    items = body.get("TransactItems", [])
    token = body.get("ClientRequestToken", "")
    if _is_pledge_commit(items):
        answer = _commit_fault(plan, request, token)
        if answer is not None:
            return answer
    if not plan.probabilities.get("transaction_conflict"):
        return None
    hot = [
        "Update" in item and item["Update"].get("TableName", "").endswith("ledger")
        for item in items
    ]
    # Only transactions that touch a ledger item (a hot fund) conflict, and a hot item
    # stays hot for a while: a retry of a conflicted transaction (same token) conflicts
    # again nine times in ten.
    if not any(hot):
        return None
    again = token and token in plan.conflicted and plan.rng.random() < 0.9
    if not again and not plan.fires("transaction_conflict"):
        return None
    if token:
        plan.conflicted.add(token)
    reasons = [
        {"Code": "TransactionConflict", "Message": "Transaction is ongoing (injected)"}
        if is_hot
        else {"Code": "None"}
        for is_hot in hot
    ]
    return error_response(
        request,
        400,
        "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons",
        CancellationReasons=reasons,
    )


def _mark_pledge_commit(params, context, **kwargs) -> None:
    """Tag the call when it is a pledge commit: only those get ``ambiguous_after_commit``."""
    context["pledge_commit"] = _is_pledge_commit(params.get("TransactItems", []))


def _on_before_transact_call(context=None, **kwargs) -> None:
    plan = active_plan()
    if plan is None or not (context or {}).get("pledge_commit"):
        return
    if plan.fires("ambiguous_no_commit"):
        # Raised outside the SDK's retry loop: the request is never sent.
        raise ReadTimeoutError(endpoint_url="injected ambiguous_no_commit")


def _on_after_transact(http_response, parsed, context=None, **kwargs) -> None:
    plan = active_plan()
    if plan is None or http_response.status_code >= 300:
        return
    if not (context or {}).get("pledge_commit"):
        return
    if plan.fires("ambiguous_after_commit"):
        raise ReadTimeoutError(endpoint_url="injected ambiguous_after_commit")


def install(client: DynamoDBClient) -> None:
    """Hook fault injection into ``client``. Handlers consult the active plan on each
    call, so installing is harmless when injection is off."""
    # First, so an in-process engine stub (moto) cannot answer before the fault does.
    client.meta.events.register_first("before-send.dynamodb", _on_before_send)
    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems", _mark_pledge_commit
    )
    client.meta.events.register("before-call.dynamodb.TransactWriteItems", _on_before_transact_call)
    client.meta.events.register("after-call.dynamodb.TransactWriteItems", _on_after_transact)


@contextlib.contextmanager
def response_lost(client: DynamoDBClient, operation: str, times: int = 1) -> Iterator[list]:
    """The next ``times`` calls of ``operation`` reach DynamoDB and take effect, but the
    response is lost on the way back, so the SDK retries the very same request.

    Yields a list that collects the status code of each swallowed response.
    """
    swallowed: list[int] = []
    session = URLLib3Session()

    def handler(request, **_kwargs):
        if len(swallowed) >= times:
            return None
        response = session.send(request)
        swallowed.append(response.status_code)
        raise ConnectionClosedError(endpoint_url=request.url)

    event = f"before-send.dynamodb.{operation}"
    client.meta.events.register(event, handler)
    try:
        yield swallowed
    finally:
        client.meta.events.unregister(event, handler)
