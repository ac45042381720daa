"""Celery tasks of the dashboard's own database: the daily prune of the delivery attempt
log (dashboard/tenancy/delivery_log.py)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from dashboard.tenancy.delivery_log import delivery_attempts_prune
from reconciliation import clock

logger = logging.getLogger(__name__)


@shared_task(
    name="dashboard.tasks.delivery_attempts_prune_task",
    ignore_result=True,
    soft_time_limit=600,
    time_limit=660,
)
def delivery_attempts_prune_task() -> int:
    """Delete the attempt log's rows past ``DELIVERY_ATTEMPT_RETENTION_DAYS``. Idempotent
    (a second run finds nothing older), so a duplicate run does no harm."""
    deleted = delivery_attempts_prune(
        now=clock.now(), days=settings.DELIVERY_ATTEMPT_RETENTION_DAYS
    )
    if deleted:
        logger.info(
            "delivery attempt log: %d rows older than %d days deleted",
            deleted,
            settings.DELIVERY_ATTEMPT_RETENTION_DAYS,
        )
    return deleted
