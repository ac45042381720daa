"""The botocore event hooks that carry out a fault plan (docs/design.md §11).

:func:`install` registers them on a client built for injecting faults
(:func:`fault_injecting_client`, or a shared client of a process where fault injection
is configured, :func:`shared_client_attach`); on each call they consult that
client's :class:`~reconciliation.simulation.faults.FaultScope` and, when a fault fires,
answer in place of the HTTP call (``before-send``) or raise around it, exactly as a real
failure would reach the SDK. No other client has them. The faults themselves, and what
each one does, are described in :mod:`reconciliation.simulation.faults`.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
from botocore.httpsession import URLLib3Session

from reconciliation.dynamo.client import Patience, Region, build_client
from reconciliation.simulation.faults import (
    COMMIT_FAULTS,
    FaultPlan,
    FaultScope,
    error_response,
    process_faults,
)

if TYPE_CHECKING:
    from botocore.awsrequest import AWSPreparedRequest
    from botocore.model import OperationModel
    from mypy_boto3_dynamodb import DynamoDBClient

# The faults' logger, as before the hooks had a module of their own.
logger = logging.getLogger("reconciliation.simulation.faults")

THROTTLING = "com.amazonaws.dynamodb.v20120810#ThrottlingException"
INTERNAL_ERROR = "com.amazonaws.dynamodb.v20120810#InternalServerError"
ACCESS_DENIED = "com.amazon.coral.service#AccessDeniedException"
SINGLE_WRITES = ("PutItem", "UpdateItem", "DeleteItem")
TRANSACT_OPERATIONS = ("Put", "Update", "Delete", "ConditionCheck")

_session: URLLib3Session | None = None
_session_lock = threading.Lock()


def _send_for_real(request: AWSPreparedRequest) -> int:
    """Send ``request`` to the engine past every hook; return the status it answered."""
    global _session
    with _session_lock:
        if _session is None:
            _session = URLLib3Session()
        session = _session
    status: int = session.send(request).status_code
    return status


def _throttled(request: AWSPreparedRequest) -> AWSResponse:
    return error_response(
        request, 400, THROTTLING, "Rate of requests exceeds the allowed throughput (injected)"
    )


def _operation(request: AWSPreparedRequest) -> str:
    target: str | bytes = request.headers.get("X-Amz-Target", b"")
    if isinstance(target, bytes):
        target = target.decode()
    return target.rpartition(".")[2]


def _is_cases_table(name: str) -> bool:
    return name.endswith("cases")


def _writes_cases(operation: str, body: dict[str, Any]) -> bool:
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


def _is_pledge_commit(items: list[dict[str, Any]]) -> bool:
    return any(
        "Put" in item and item["Put"].get("TableName", "").endswith("pledges") for item in items
    )


def _commit_fault(plan: FaultPlan, request: AWSPreparedRequest, token: str) -> AWSResponse | None:
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


def _cancelled(request: AWSPreparedRequest, reasons: list[dict[str, str]]) -> AWSResponse:
    return error_response(
        request,
        400,
        "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons",
        CancellationReasons=reasons,
    )


def _on_ledger(hot: list[bool], code: str, message: str) -> list[dict[str, str]]:
    """Cancellation reasons naming ``code`` on the ledger items, ``None`` on the others."""
    return [{"Code": code, "Message": message} if is_hot else {"Code": "None"} for is_hot in hot]


def _transaction_fault(
    plan: FaultPlan, request: AWSPreparedRequest, body: dict[str, Any]
) -> AWSResponse | None:
    """A pledge commit fault, or a cancellation of a transaction that touches a ledger
    item (a hot fund): ``transaction_conflict`` and ``cancelled_throttled``."""
    items = body.get("TransactItems", [])
    token = body.get("ClientRequestToken", "")
    if _is_pledge_commit(items):
        answer = _commit_fault(plan, request, token)
        if answer is not None:
            return answer
    hot = [
        "Update" in item and item["Update"].get("TableName", "").endswith("ledger")
        for item in items
    ]
    if not any(hot):
        return None
    if _is_pledge_commit(items) and plan.fires("cancelled_throttled"):
        return _cancelled(
            request, _on_ledger(hot, "ThrottlingError", "Throughput exceeds the limit (injected)")
        )
    if not plan.probabilities.get("transaction_conflict"):
        return None
    # Only transactions that touch a ledger item (a hot fund) conflict, and a hot item
    # stays hot for a while: a retry of a conflicted transaction (same token) conflicts
    # again nine times in ten.
    again = token and token in plan.conflicted and plan.rng.random() < 0.9
    if not again and not plan.fires("transaction_conflict"):
        return None
    if token:
        plan.conflicted.add(token)
    return _cancelled(
        request, _on_ledger(hot, "TransactionConflict", "Transaction is ongoing (injected)")
    )


# Faults that need a transaction's body to decide.
TRANSACTION_FAULTS = (*COMMIT_FAULTS, "transaction_conflict", "cancelled_throttled")


class FaultHooks:
    """The hooks of one client, consulting ``scope``'s plan on each call."""

    def __init__(self, scope: FaultScope):
        self.scope = scope

    def before_send(self, request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse | None:
        plan = self.scope.plan()
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
            and any(plan.probabilities.get(name) for name in TRANSACTION_FAULTS)
        )
        if not watched:
            return None
        body = json.loads(request.body or b"{}")
        if _writes_cases(operation, body) and plan.fires("case_write_fails"):
            return _throttled(request)
        if operation != "TransactWriteItems":
            return None
        return _transaction_fault(plan, request, body)

    def before_transact_call(self, context: dict[str, Any] | None = None, **kwargs: Any) -> None:
        plan = self.scope.plan()
        if plan is None or not (context or {}).get("pledge_commit"):
            return
        if plan.fires("ambiguous_no_commit"):
            # Raised outside the SDK's retry loop: the request is never sent.
            raise ReadTimeoutError(endpoint_url="injected ambiguous_no_commit")

    def after_transact(
        self,
        http_response: AWSResponse,
        parsed: dict[str, Any],
        model: OperationModel,
        context: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        plan = self.scope.plan()
        if plan is None or model.name != "TransactWriteItems" or http_response.status_code >= 300:
            return
        if not (context or {}).get("pledge_commit"):
            return
        if plan.fires("ambiguous_after_commit"):
            raise ReadTimeoutError(endpoint_url="injected ambiguous_after_commit")


def _mark_pledge_commit(params: dict[str, Any], context: dict[str, Any], **kwargs: Any) -> None:
    """Tag the call when it is a pledge commit: only those get ``ambiguous_after_commit``."""
    context["pledge_commit"] = _is_pledge_commit(params.get("TransactItems", []))


def install(client: DynamoDBClient, scope: FaultScope) -> None:
    """Hook fault injection into ``client``, consulting ``scope`` on each call (a client
    built for injecting faults; no shared client of a production process)."""
    hooks = FaultHooks(scope)
    # First, so an in-process engine stub (moto) cannot answer before the fault does.
    client.meta.events.register_first("before-send.dynamodb", hooks.before_send)
    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems", _mark_pledge_commit
    )
    client.meta.events.register(
        "before-call.dynamodb.TransactWriteItems", hooks.before_transact_call
    )
    # Last of every after-call handler: the commit happened, so metrics and the capacity
    # sink see it before the answer is lost.
    client.meta.events.register_last("after-call.dynamodb", hooks.after_transact)


def fault_injecting_client(
    region: Region, faults: FaultScope, *, wait: Patience | None = None
) -> DynamoDBClient:
    """A client of its own for ``region`` with the fault hooks, consulting ``faults``: for
    the drill and the simulator, which inject faults into their own calls beside live
    traffic. Never cached, never shared."""
    client = build_client(region, wait)
    install(client, faults)
    return client


def shared_client_attach(client: DynamoDBClient) -> FaultScope | None:
    """The hook the simulation app registers on the shared clients
    (``dynamo.client_hooks``): where fault injection is configured, the process's faults
    on ``client`` and its stores; elsewhere nothing."""
    scope = process_faults()
    if scope is not None:
        install(client, scope)
    return scope
