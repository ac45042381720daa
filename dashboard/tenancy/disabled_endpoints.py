"""The webhook endpoints the dispatcher disabled after a day of failed deliveries
(docs/webhooks.md), as supervisors are told of them: on the overview, and in their daily
e-mail, which reconciliation builds and asks for them through
``reconciliation.casework.hooks.disabled_endpoints_asked`` (connected by
``DashboardConfig.ready``), since the rows are the dashboard's."""

from __future__ import annotations

from typing import Any

from dashboard.tenancy.models import WebhookEndpoint
from reconciliation.casework.hooks import DisabledEndpoint, disabled_endpoints_asked


def disabled_endpoints(*, limit: int | None = None) -> list[DisabledEndpoint]:
    """Disabled endpoints (by the dispatcher: ``disabled_at`` set), the latest first."""
    rows = (
        WebhookEndpoint.objects.filter(enabled=False, disabled_at__isnull=False)
        .select_related("tenant")
        .order_by("-disabled_at", "pk")
    )
    return [
        DisabledEndpoint(
            endpoint_id=f"E{row.pk}",
            tenant=row.tenant.name,
            url=row.url,
            disabled_at=row.disabled_at,
            failing_since=row.failing_since,
            last_success_at=row.last_success_at,
        )
        for row in (rows if limit is None else rows[:limit])
        if row.disabled_at is not None
    ]


def _asked(sender: Any, **kwargs: Any) -> list[DisabledEndpoint]:
    return disabled_endpoints()


def connect() -> None:
    disabled_endpoints_asked.connect(_asked, dispatch_uid="dashboard.tenancy.disabled_endpoints")
