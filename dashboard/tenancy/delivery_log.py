"""The delivery attempt log (docs/webhooks.md, "Deliveries"): one row per POST the
dispatcher made (``DeliveryAttempt``), written at its edge, read per endpoint (filtered,
paged newest first, as CSV) and per pledge, and pruned after
``DELIVERY_ATTEMPT_RETENTION_DAYS``.

The log is history, not state: what is due and what was delivered stays on the pledge
item in DynamoDB. A row that cannot be written is logged and skipped, never a reason to
fail or repeat a delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Max, Q, QuerySet

from dashboard.tenancy.models import DeliveryAttempt, WebhookEndpoint
from reconciliation.acks.models import Attempt, EventType

logger = logging.getLogger(__name__)

PAGE_SIZE = 50
# A pledge has a few deliveries of at most twelve attempts each: this shows them all.
PLEDGE_ATTEMPTS_SHOWN = 100
# The CSV holds at most this many attempts, newest first (narrow by time for more).
CSV_MAX_ROWS = 10000
# The prune deletes in batches this large, so no statement holds a long lock.
PRUNE_BATCH = 5000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class AttemptOutcome(StrEnum):
    """The outcome filter of an endpoint's attempts."""

    SUCCEEDED = "succeeded"  # answered 2xx
    FAILED = "failed"  # another status, or no answer


@dataclass(frozen=True)
class AttemptFilters:
    """What an endpoint's attempts are narrowed to; every part optional."""

    outcome: AttemptOutcome | None = None
    event_type: EventType | None = None
    client_key: str = ""  # one pledge of the endpoint's tenant
    since: datetime | None = None
    until: datetime | None = None


class BadCursor(ValueError):
    """A ``before`` cursor that this page did not make."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ends: the last row's time and id (rows share a time, ids break ties)."""

    at: datetime
    pk: int

    def text(self) -> str:
        # Whole microseconds, by integer arithmetic: the next page compares times for
        # equality (rows sharing the last row's time), so the cursor must be exact.
        stamp = (self.at - _EPOCH) // timedelta(microseconds=1)
        return f"{stamp}.{self.pk}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        stamp, _, pk = text.partition(".")
        if not (stamp.isdigit() and pk.isdigit() and len(stamp) < 20 and len(pk) < 20):
            raise BadCursor(text)
        return cls(_EPOCH + timedelta(microseconds=int(stamp)), int(pk))


@dataclass(frozen=True)
class AttemptPage:
    rows: list[DeliveryAttempt]
    next_cursor: Cursor | None  # None on the last page


def _attempt_fields(attempt: Attempt) -> dict[str, Any] | None:
    pk = attempt.endpoint.endpoint_id.removeprefix("E")
    if not pk.isdigit():
        return None  # not one of our endpoints' ids (a test's or a simulation's stand-in)
    result = attempt.result
    return {
        "endpoint_id": int(pk),
        "tenant": attempt.endpoint.tenant,
        "intent_id": attempt.intent_id,
        "event_type": str(attempt.event_type),
        "webhook_id": attempt.webhook_id,
        "at": attempt.at,
        "code": result.code,
        "error": result.error[:200],
        "duration_ms": result.duration_ms,
        "ok": result.ok,
    }


def attempt_log(attempt: Attempt) -> None:
    """One row for ``attempt``; a database that refuses it costs the row, never the
    delivery (recorded on the pledge item in DynamoDB regardless)."""
    fields = _attempt_fields(attempt)
    if fields is None:
        return
    try:
        DeliveryAttempt.objects.create(**fields)
    except DatabaseError as exc:
        # An endpoint removed mid-pass (its foreign key), or the database unreachable.
        logger.warning("attempt to %s not logged: %s", attempt.endpoint.endpoint_id, exc)


def attempts_log(attempts: list[Attempt]) -> None:
    """A row for each of ``attempts``, in one INSERT (a dispatcher's run of attempts);
    refused, each alone, so only the rows the database refuses are lost."""
    rows = [DeliveryAttempt(**f) for f in map(_attempt_fields, attempts) if f is not None]
    if not rows:
        return
    try:
        with transaction.atomic():
            DeliveryAttempt.objects.bulk_create(rows)
    except DatabaseError:
        for attempt in attempts:
            attempt_log(attempt)


def _filtered(endpoint: WebhookEndpoint, filters: AttemptFilters) -> QuerySet[DeliveryAttempt]:
    rows = DeliveryAttempt.objects.filter(endpoint=endpoint)
    if filters.outcome is not None:
        rows = rows.filter(ok=filters.outcome == AttemptOutcome.SUCCEEDED)
    if filters.event_type is not None:
        rows = rows.filter(event_type=str(filters.event_type))
    if filters.client_key:
        tenant = endpoint.tenant.name
        rows = rows.filter(tenant=tenant, intent_id=f"{tenant}#{filters.client_key}")
    if filters.since is not None:
        rows = rows.filter(at__gte=filters.since)
    if filters.until is not None:
        rows = rows.filter(at__lt=filters.until)
    return rows.order_by("-at", "-pk")


def endpoint_attempts(
    endpoint: WebhookEndpoint,
    filters: AttemptFilters,
    *,
    before: Cursor | None = None,
    limit: int = PAGE_SIZE,
) -> AttemptPage:
    """One page of the endpoint's attempts, newest first, after ``before`` (keyset
    paging: a page costs the same however far back it is, and rows logged meanwhile
    never shift the next page)."""
    rows = _filtered(endpoint, filters)
    if before is not None:
        rows = rows.filter(Q(at__lt=before.at) | Q(at=before.at, pk__lt=before.pk))
    found = list(rows[: limit + 1])
    page = found[:limit]
    more = len(found) > limit
    return AttemptPage(page, Cursor(page[-1].at, page[-1].pk) if more else None)


def endpoint_attempts_all(
    endpoint: WebhookEndpoint, filters: AttemptFilters, *, limit: int = CSV_MAX_ROWS
) -> Iterator[DeliveryAttempt]:
    """The endpoint's attempts for the CSV, newest first, read in chunks as streamed."""
    return _filtered(endpoint, filters)[:limit].iterator(chunk_size=500)


def pledge_attempts(tenant: str, intent_id: str) -> list[DeliveryAttempt]:
    """The pledge's attempts to every endpoint, newest first."""
    rows = DeliveryAttempt.objects.filter(tenant=tenant, intent_id=intent_id)
    return list(rows.order_by("-at", "-pk")[:PLEDGE_ATTEMPTS_SHOWN])


@dataclass(frozen=True)
class FailedDelivery:
    """A delivery of the endpoint with a failed attempt in the window: a candidate for a
    bulk resend (whether it is still undelivered is for DynamoDB to say)."""

    intent_id: str
    event_type: str
    last_failed_at: datetime


def endpoint_failures_since(
    endpoint: WebhookEndpoint, since: datetime, *, limit: int
) -> tuple[list[FailedDelivery], int]:
    """The endpoint's deliveries with a failed attempt at or after ``since``, one each,
    the most recently failed first, at most ``limit``; and how many there are in all."""
    grouped = (
        DeliveryAttempt.objects.filter(endpoint=endpoint, ok=False, at__gte=since)
        .values("intent_id", "event_type")
        .annotate(last=Max("at"))
    )
    rows = [
        FailedDelivery(r["intent_id"], r["event_type"], r["last"])
        for r in grouped.order_by("-last", "intent_id", "event_type")[:limit]
    ]
    return rows, (len(rows) if len(rows) < limit else grouped.count())


def delivery_attempts_prune(*, now: datetime, days: int) -> int:
    """Delete the rows older than ``days`` before ``now``, in batches; the count."""
    cutoff = now - timedelta(days=days)
    deleted = 0
    while True:
        batch = list(
            DeliveryAttempt.objects.filter(at__lt=cutoff).values_list("pk", flat=True)[:PRUNE_BATCH]
        )
        if not batch:
            return deleted
        count, _ = DeliveryAttempt.objects.filter(pk__in=batch).delete()
        deleted += count


ATTEMPT_CSV_COLUMNS = (
    "at",
    "event_type",
    "tenant",
    "client_key",
    "webhook_id",
    "outcome",
    "http_status",
    "error",
    "duration_ms",
)


@dataclass(frozen=True)
class CsvAttempt:
    """One attempt as a line of the endpoint's CSV."""

    row: DeliveryAttempt

    def cells(self) -> list[str]:
        r = self.row
        return [
            r.at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            r.event_type,
            r.tenant,
            r.client_key,
            r.webhook_id,
            str(AttemptOutcome.SUCCEEDED if r.ok else AttemptOutcome.FAILED),
            "" if r.code is None else str(r.code),
            r.error,
            f"{r.duration_ms:.1f}",
        ]
