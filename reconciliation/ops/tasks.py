"""Celery task of the reconciliation drill (the Drill page's button)."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(
    name="reconciliation.tasks.drill.drill_task",
    # Not acks_late: a drill interrupted half-way is simply run again by a person.
    soft_time_limit=120,
    time_limit=150,
)
def drill_task() -> dict[str, Any]:
    # Every process imports this module (ReconciliationConfig.ready()); the drill and its
    # fault-injecting clients load only in the process that runs one.
    from reconciliation.ops.drill import drill_run  # noqa: PLC0415 - keeps every process light

    return drill_run().as_dict()
