"""An account's audit event, on its ``STAFF#<username>`` stream in the primary region's
store (``first_store``, as every staff stream: docs/regions.md). The one place the
dashboard decides where an account's events go."""

from __future__ import annotations

from typing import Any

from reconciliation.audit.models import AuditEvent
from reconciliation.audit.staff import staff_event_append
from reconciliation.stores import first_store


def account_event_append(user: Any, event: AuditEvent) -> dict[str, Any]:
    """Append ``event`` about ``user``'s account (a Django user): its action, actor,
    before, after, reason text and detail; returns the event as stored."""
    return staff_event_append(
        first_store(),
        username=user.get_username(),
        event=event,
    )
