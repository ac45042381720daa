"""Faults for tests: a plan on every client of the process, as a faulty server runs, and
test-side faults that need no plan (a response lost on its way back, at a chosen call)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session
from django.test.utils import override_settings

from reconciliation.simulation import faults

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def _spec(plan: faults.FaultPlan) -> str:
    return ",".join(f"{name}={p}" for name, p in plan.probabilities.items())


def _chosen(plan: faults.FaultPlan | Mapping[str, float]) -> faults.FaultPlan:
    return plan if isinstance(plan, faults.FaultPlan) else faults.FaultPlan(dict(plan))


@contextlib.contextmanager
def injected(plan: faults.FaultPlan | Mapping[str, float]) -> Iterator[faults.FaultPlan]:
    """``plan``'s faults on every DynamoDB client of this process for the block, as in a
    process started with ``ALLOW_FAULT_INJECTION=1`` and ``FAULT_INJECTION`` set: the
    shared clients are built with the fault hooks (production ones have none), and
    consult ``plan``. A client or store taken before the block keeps none."""
    chosen = _chosen(plan)
    with (
        override_settings(ALLOW_FAULT_INJECTION=True, FAULT_INJECTION=_spec(chosen)),
        faults.injected(chosen),
    ):
        yield chosen


def plan_everywhere(settings: Any, plan: faults.FaultPlan | Mapping[str, float]) -> None:
    """As :func:`injected`, from now until the test ends (the ``settings`` fixture puts
    the settings back) or ``faults.set_plan(None)``."""
    chosen = _chosen(plan)
    settings.ALLOW_FAULT_INJECTION = True
    settings.FAULT_INJECTION = _spec(chosen)
    faults.set_plan(chosen)


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
