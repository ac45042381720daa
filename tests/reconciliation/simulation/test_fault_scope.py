"""Where fault injection runs: never on the shared clients of a production process (the
API, the pages, the tasks); on the clients built for injecting faults (the drill's, the
simulator's), and on every client of a process started with ``ALLOW_FAULT_INJECTION``
and ``FAULT_INJECTION`` (the demos and the faulty servers of the reliability checks)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciliation.dynamo.client import dynamodb_client, regions, reset_clients
from reconciliation.simulation import fault_hooks, faults
from reconciliation.simulation.fault_hooks import fault_injecting_client
from reconciliation.stores import home_store
from tests.conftest import pledge_body

# Every event the fault hooks listen on, as a call of each kind emits it.
EVENTS = [
    f"{stage}.dynamodb.{operation}"
    for stage in ("before-parameter-build", "before-call", "before-send", "after-call")
    for operation in ("TransactWriteItems", "PutItem", "UpdateItem", "GetItem", "Query")
]


def fault_handlers(client: Any) -> list[object]:
    """The handlers of ``client`` that belong to fault injection, for any call it makes."""
    emitter = client.meta.events._emitter
    found: list[object] = []
    for event in EVENTS:
        for handler in emitter._handlers.prefix_search(event):
            module = getattr(handler, "__module__", "") or type(handler).__module__
            if module in (fault_hooks.__name__, faults.__name__) and handler not in found:
                found.append(handler)
    return found


@pytest.fixture
def fresh_clients():
    reset_clients()
    yield
    reset_clients()


@pytest.mark.parametrize(
    "allowed,spec",
    [(False, ""), (False, "throttle=1"), (True, "")],
    ids=["production", "set-but-not-allowed", "allowed-but-not-set"],
)
def test_the_shared_client_carries_no_fault_hook_in_production(
    settings, fresh_clients, allowed, spec
):
    """A production process's shared client (DJANGO_DEBUG=0 and no ALLOW_FAULT_INJECTION,
    or FAULT_INJECTION empty) has no fault handler on any call, and neither have its stores."""
    settings.ALLOW_FAULT_INJECTION = allowed
    settings.FAULT_INJECTION = spec
    assert fault_handlers(dynamodb_client()) == []
    store = home_store("acme#create_pledge#k")
    assert fault_handlers(store.client) == [] and store.faults is None


def test_every_shared_client_carries_the_hooks_where_fault_injection_is_configured(
    settings, fresh_clients
):
    """With ALLOW_FAULT_INJECTION and FAULT_INJECTION set, every shared client is built with
    the fault hooks, and the stores carry the process's faults for the code's own points."""
    settings.ALLOW_FAULT_INJECTION = True
    settings.FAULT_INJECTION = "throttle=0"
    assert fault_handlers(dynamodb_client()) != []
    assert home_store("acme#create_pledge#k").faults is faults.PROCESS_FAULTS


def test_a_fault_injecting_client_carries_the_hooks_of_its_own_scope(settings, fresh_clients):
    """A client built for injecting faults has the hooks whatever the settings, and they
    consult its own scope, not the process's plan."""
    scope = faults.FaultScope()
    client = fault_injecting_client(regions()[0], scope)
    handlers = fault_handlers(client)
    assert handlers != []
    owners = {h.__self__ for h in handlers if hasattr(h, "__self__")}
    assert owners and {owner.scope for owner in owners} == {scope}
    assert fault_handlers(dynamodb_client()) == []


@pytest.mark.engines("moto")
def test_a_pledge_in_production_runs_nothing_of_fault_injection(ddb, api, monkeypatch):
    """A 201 through the API, with a process-wide plan set but injection not configured,
    never consults a plan nor draws a fault: neither the client hooks nor the crash point
    run."""

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("fault injection ran on a production call")

    faults.set_plan(faults.FaultPlan({"access_denied": 1.0, "crash_after_claim": 1.0}))
    monkeypatch.setattr(faults, "active_plan", forbidden)
    monkeypatch.setattr(fault_hooks, "active_plan", forbidden, raising=False)
    monkeypatch.setattr(faults.FaultPlan, "fires", forbidden)
    response = api.post("k-prod", pledge_body())
    assert response.status_code == 201, response.content


def test_no_task_fault_hook_is_connected_in_production(settings, monkeypatch):
    """The Celery tasks carry no fault hook unless fault injection is configured; where it
    is, ``slow_task`` holds up the retry task's start, and no other task's."""
    from celery import signals

    from reconciliation.casework.retries import RETRY_COMMIT_TASK
    from reconciliation.simulation.apps import task_faults_install

    class Task:
        def __init__(self, name: str):
            self.name = name

    def connected() -> list[object]:
        return [
            receiver
            for _key, receiver in signals.task_prerun.receivers
            if getattr(receiver, "__module__", "") == faults.__name__
        ]

    slept: list[float] = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    settings.FAULT_INJECTION = "slow_task=1"
    settings.ALLOW_FAULT_INJECTION = False
    task_faults_install()
    assert connected() == []
    settings.ALLOW_FAULT_INJECTION = True
    try:
        task_faults_install()
        task_faults_install()  # once, however often asked
        assert len(connected()) == 1
        signals.task_prerun.send(sender=Task("reconciliation.tasks.cases.sweep_task"))
        assert slept == []
        signals.task_prerun.send(sender=Task(RETRY_COMMIT_TASK))
        assert slept == [faults.SLOW_TASK_S]
    finally:
        signals.task_prerun.disconnect(dispatch_uid=faults.TASK_FAULTS_UID)
    assert connected() == []
