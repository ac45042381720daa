"""Celery tasks of the audit trail: the daily digest and background exports. Tasks take
ids, re-read state, return quietly when there is nothing to do, and call one service
(STYLE.md)."""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError
from celery import shared_task
from celery.result import AsyncResult

from reconciliation.services.audit import AuditAppendContended

logger = logging.getLogger(__name__)

TRANSIENT = (BotoCoreError, AuditAppendContended)
# A large export reads the whole range once; it must end before Redis's visibility
# timeout (3600 s) hands it to a second worker.
EXPORT_SOFT_TIME_LIMIT_S = 3000
EXPORT_TIME_LIMIT_S = 3300


@shared_task(
    name="reconciliation.tasks.audit.audit_daily_digest",
    ignore_result=True,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=5,
    soft_time_limit=600,
    time_limit=660,
)
def audit_daily_digest() -> list[str]:
    """Hourly: writes each finished UTC day's signed digest once; otherwise a no-op
    (the service reads the last digest from ``SYSTEM`` first)."""
    from reconciliation.services.audit import audit_daily_digest as digest

    written = digest()
    if written:
        logger.info("audit digests written for %s", ", ".join(written))
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
def audit_export_task(self, export_id: str) -> dict:
    """Run a requested export into ``AUDIT_EXPORT_DIR``, reporting progress as the task
    state ``PROGRESS`` with ``rows`` and ``percent``."""
    from reconciliation.audit_export import export_run_requested

    def progress(rows: int, fraction: float) -> None:
        self.update_state(
            state="PROGRESS", meta={"rows": rows, "percent": round(fraction * 100, 1)}
        )

    core = export_run_requested(export_id, progress=progress)
    if core is None:
        return {"export_id": export_id, "skipped": True}
    return {"export_id": export_id, "rows": core["row_count"], "sha256": core["sha256"]}


def export_enqueue(export_id: str) -> None:
    """Queue the export under its own id, so its progress is ``AsyncResult(export_id)``."""
    audit_export_task.apply_async(args=[export_id], task_id=export_id)


def export_progress(export_id: str) -> dict:
    """The task's last reported progress: ``state``, ``rows``, ``percent``."""
    result = AsyncResult(export_id, app=audit_export_task.app)
    info = result.info if isinstance(result.info, dict) else {}
    return {
        "state": result.state,
        "rows": int(info.get("rows", 0) or 0),
        "percent": float(info.get("percent", 0) or 0),
    }
