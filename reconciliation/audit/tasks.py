"""Celery tasks of the audit trail: signed checkpoints and background exports. Tasks take
ids, re-read state, return quietly when there is nothing to do, and call one service."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError
from celery import shared_task, states
from celery.result import AsyncResult
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from reconciliation.actors import system_actor
from reconciliation.audit import checkpoints
from reconciliation.audit.append import AuditAppendContended
from reconciliation.audit.export.background import export_run_requested
from reconciliation.audit.export.events import export_event_append
from reconciliation.audit.models import AuditAction
from reconciliation.stores import every_store, first_store

if TYPE_CHECKING:
    from celery import Task

logger = logging.getLogger(__name__)

TRANSIENT = (BotoCoreError, AuditAppendContended)
# What a bounded publish or result read raises when Redis refuses or does not answer
# (the bounds are the CELERY_* socket timeouts and publish retry policy in settings).
QUEUE_ERRORS = (OperationalError, RedisError, OSError)
UNAVAILABLE = "Background work is unavailable; nothing was started."
PROGRESS_UNAVAILABLE = "UNAVAILABLE"


class BackgroundUnavailable(Exception):
    """The task queue (Redis) did not take the task: nothing was started."""


# A large export reads the whole range once; it must end before Redis's visibility
# timeout (3600 s) hands it to a second worker.
EXPORT_SOFT_TIME_LIMIT_S = 3000
EXPORT_TIME_LIMIT_S = 3300


CHECKPOINT_TASK_OPTIONS: dict[str, Any] = {
    "ignore_result": True,
    "autoretry_for": TRANSIENT,
    "retry_backoff": 5,
    "retry_backoff_max": 120,
    "retry_jitter": True,
    "max_retries": 5,
    "soft_time_limit": 600,
    "time_limit": 660,
}


@shared_task(name="reconciliation.tasks.audit.audit_checkpoint", **CHECKPOINT_TASK_OPTIONS)
def audit_checkpoint() -> list[str]:
    """Every 5 minutes (beat): signs each period's checkpoint once the period has been
    over for ``CHECKPOINT_SETTLE_S``; otherwise a no-op (the service reads the newest
    checkpoint from ``SYSTEM`` first). One checkpoint covers every region's streams and
    is written in the first region."""
    written = checkpoints.audit_checkpoint(first_store(), stores=every_store())
    if written:
        logger.info("audit checkpoints written for %s", ", ".join(written))
    return written


@shared_task(name="reconciliation.tasks.audit.audit_daily_digest", **CHECKPOINT_TASK_OPTIONS)
def audit_daily_digest() -> list[str]:
    """The task's name before checkpoints, kept so a message from an older beat (during
    an upgrade) still runs: writes the due checkpoints."""
    # Any to mypy: shared_task(**options) matches its bind=False and bind=True overloads.
    written: list[str] = audit_checkpoint()
    return written


@shared_task(
    bind=True,
    name="reconciliation.tasks.audit.audit_export_task",
    # Idempotent: it re-reads EXPORT#{id}, writes the file under a temporary name and
    # appends export_completed only once, so a redelivery after a lost worker is safe.
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=EXPORT_SOFT_TIME_LIMIT_S,
    time_limit=EXPORT_TIME_LIMIT_S,
)
def audit_export_task(self: Task[..., dict[str, Any]], export_id: str) -> dict[str, Any]:
    """Run a requested export into ``AUDIT_EXPORT_DIR``, reporting progress as the task
    state ``PROGRESS`` with ``rows`` and ``percent``."""

    def progress(rows: int, fraction: float) -> None:
        self.update_state(
            state="PROGRESS", meta={"rows": rows, "percent": round(fraction * 100, 1)}
        )

    core = export_run_requested(
        export_id, progress=progress, store=first_store(), stores=every_store()
    )
    if core is None:
        return {"export_id": export_id, "skipped": True}
    return {"export_id": export_id, "rows": core["row_count"], "sha256": core["sha256"]}


def export_enqueue(export_id: str) -> None:
    """Queue the export under its own id, so its progress is ``AsyncResult(export_id)``.

    If the queue does not take it, ``system`` closes the request as ``export_abandoned``
    before :class:`BackgroundUnavailable` is raised (the web answers a clear 503): no
    ``export_requested`` is left that nothing will ever complete. Should a publish that
    timed out reach Redis after all, the task finds the export abandoned and does
    nothing."""
    try:
        audit_export_task.apply_async(args=(export_id,), task_id=export_id)
    except OperationalError as exc:
        logger.warning("export %s not queued (%s)", export_id, type(exc).__name__)
        export_event_append(
            first_store(),
            export_id=export_id,
            action=AuditAction.EXPORT_ABANDONED,
            actor=system_actor(),
            detail={"reason": "task_queue_unavailable"},
        )
        raise BackgroundUnavailable(UNAVAILABLE) from exc


@dataclass(frozen=True)
class ExportProgress:
    """What the export task last reported: Celery's ``state``, rows read, percent done;
    ``state`` is ``UNAVAILABLE`` when Redis does not answer."""

    state: str
    rows: int = 0
    percent: float = 0.0

    @property
    def failed(self) -> bool:
        return self.state == states.FAILURE

    @property
    def unavailable(self) -> bool:
        return self.state == PROGRESS_UNAVAILABLE

    @property
    def queued(self) -> bool:
        return self.state == states.PENDING


def export_progress(export_id: str) -> ExportProgress:
    """The task's last reported progress (one bounded read of Redis, never a wait)."""
    try:
        result: AsyncResult[Any] = AsyncResult(export_id, app=audit_export_task.app)
        state, info = result.state, result.info
    except QUEUE_ERRORS as exc:
        logger.warning("export %s progress unreadable (%s)", export_id, type(exc).__name__)
        return ExportProgress(PROGRESS_UNAVAILABLE)
    info = info if isinstance(info, dict) else {}
    return ExportProgress(state, int(info.get("rows", 0) or 0), float(info.get("percent", 0) or 0))
