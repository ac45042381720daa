"""The simulation app: in ``INSTALLED_APPS`` only where fault injection is allowed
(``DJANGO_DEBUG=1`` or ``ALLOW_FAULT_INJECTION=1``: dashboard/settings.py, and always in
the tests' settings), so a production process never loads fault code. Its ``ready()``
attaches fault injection to production's seams: the shared DynamoDB clients
(``dynamo.client_hooks``) and the Celery tasks (``task_prerun``)."""

from __future__ import annotations

from django.apps import AppConfig

from reconciliation.casework.retries import RETRY_COMMIT_TASK
from reconciliation.dynamo.client_hooks import shared_client_hook_register
from reconciliation.simulation import faults
from reconciliation.simulation.fault_hooks import shared_client_attach


class SimulationConfig(AppConfig):
    name = "reconciliation.simulation"
    label = "simulation"
    verbose_name = "Simulation and fault injection"

    def ready(self) -> None:
        shared_client_hook_register(shared_client_attach)
        task_faults_install()


def task_faults_install() -> None:
    """Where fault injection is configured, the task-level faults (``slow_task`` holds up
    the retry task's start); elsewhere nothing is connected, so no task runs fault code."""
    faults.task_faults_install(frozenset({RETRY_COMMIT_TASK}))
