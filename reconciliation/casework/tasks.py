"""Celery tasks of reconciliation cases. Tasks take ids, re-read state, return quietly
when there is nothing to do, and call one service."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError
from celery import shared_task

from reconciliation.audit.tasks import QUEUE_ERRORS
from reconciliation.casework.drift.check import ledger_drift_check
from reconciliation.casework.notifications import digest_send
from reconciliation.casework.overrides import overrides_expire
from reconciliation.casework.overview import overview_summary_refresh
from reconciliation.casework.retries import RETRY_COMMIT_TASK, retry_commit_run
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.repository import ClaimTaken
from reconciliation.dynamo.retry import RetriesExhausted
from reconciliation.stores import case_store, every_store, home_store

if TYPE_CHECKING:
    from celery import Task

logger = logging.getLogger(__name__)

# Transient errors only: DynamoDB unreachable or throttled past the request budget, or a
# claim that moved under us (re-read on the next attempt).
TRANSIENT = (BotoCoreError, RetriesExhausted, ClaimTaken)


@shared_task(
    name="reconciliation.tasks.cases.sweep_task",
    ignore_result=True,
    soft_time_limit=120,
    time_limit=150,
)
def sweep_task() -> dict[str, Any]:
    """Every detection sweep once. Idempotent (case ids derive from their source), so a
    duplicate run does no harm; not acks_late, the next beat tick covers a lost run."""
    report = sweep_all(every_store(), home=home_store)
    if report.opened or report.auto_resolved:
        logger.info(
            "sweep opened=%d auto_resolved=%d", len(report.opened), len(report.auto_resolved)
        )
    return {"opened": report.opened, "auto_resolved": report.auto_resolved}


@shared_task(
    name="reconciliation.tasks.cases.expire_overrides_task",
    ignore_result=True,
    soft_time_limit=60,
    time_limit=90,
)
def expire_overrides_task() -> list[str]:
    # Each region expires the requests on its own cases.
    return [case_id for store in every_store() for case_id in overrides_expire(store=store)]


@shared_task(
    bind=True,
    name=RETRY_COMMIT_TASK,
    # Idempotent: it re-reads the case, claim and pledge, the durable pledge key refuses
    # a second write, and its result is written only on the case version it read while
    # the request is still due; so a redelivery (the ordinary case with acks_late) is safe.
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT,
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=8,
    soft_time_limit=60,
    time_limit=90,
)
def retry_commit_task(self: Task[..., str], case_id: str, request_id: str | None = None) -> str:
    """One RETRY_COMMIT request (``request_id``; messages queued before it was passed run
    the case's current retry). A redelivery finds the request done and writes nothing."""
    outcome = retry_commit_run(case_id, store=case_store(case_id), request_id=request_id)
    if outcome.wait_s is not None:
        # The claim's lease is still running; try again when it ends (well below the
        # broker's visibility timeout).
        raise self.retry(countdown=min(outcome.wait_s + 1, 600))
    return outcome.kind


@shared_task(
    name="reconciliation.tasks.cases.supervisor_digest_task",
    ignore_result=True,
    soft_time_limit=120,
    time_limit=150,
)
def supervisor_digest_task() -> dict[str, Any]:
    """The supervisors' daily e-mail (beat, at ``SUPERVISOR_DIGEST_HOUR`` UTC). Not
    acks_late and not retried: a lost run costs one day's reminder, a duplicate a
    second e-mail; the overview shows the same at any time."""
    sent = digest_send(stores=every_store())
    logger.info("%s", sent.line())
    return {"recipients": len(sent.recipients), "empty": sent.is_empty}


@shared_task(
    name="reconciliation.tasks.cases.ledger_drift_task",
    ignore_result=True,
    soft_time_limit=240,
    time_limit=280,
)
def ledger_drift_task() -> dict[str, Any]:
    """The ledger drift check (beat, every ``LEDGER_DRIFT_INTERVAL_S``). Idempotent: its
    checkpoint is version-conditioned and its case ids derive from it, so a duplicate or
    overlapping run opens nothing twice; not acks_late, the next tick covers a lost run."""
    report = ledger_drift_check(every_store(), home=home_store, force=True)
    return {"opened": report.opened, "duplicates": report.duplicates}


@shared_task(
    name="reconciliation.tasks.cases.overview_summary_task",
    ignore_result=True,
    soft_time_limit=60,
    time_limit=90,
)
def overview_summary_task() -> dict[str, Any]:
    """Recompute the overview's kept summary (asked by a view that found it stale,
    reconciliation/casework/overview.py). Idempotent: a duplicate run writes a summary
    as fresh; not retried, the next stale view asks again."""
    summary = overview_summary_refresh(stores=every_store())
    return {"computed_at": summary.computed_at}


def overview_summary_enqueue() -> bool:
    """Queue :func:`overview_summary_task`; ``False`` (logged) when the queue does not
    take it: the overview goes on showing the kept summary and asks again later."""
    try:
        # Expires: a refresh nobody ran within a minute is overtaken by a later ask.
        overview_summary_task.apply_async(expires=60)
    except QUEUE_ERRORS as exc:
        logger.warning("overview summary refresh not queued (%s)", type(exc).__name__)
        return False
    return True
