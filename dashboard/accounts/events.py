"""An account's audit event, on its ``STAFF#<username>`` stream in the primary region's
store (``first_store``, as every staff stream: docs/regions.md). The one place the
dashboard decides where an account's events go."""

from __future__ import annotations

from typing import Any

from reconciliation.actors import Actor
from reconciliation.audit.models import AuditEvent
from reconciliation.audit.staff import staff_event_append
from reconciliation.stores import first_store


def account_event_append(
    user: Any,
    *,
    action: str,
    actor: Actor,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    reason_text: str | None = None,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Append ``action`` about ``user``'s account (a Django user); returns the event."""
    return staff_event_append(
        first_store(),
        username=user.get_username(),
        event=AuditEvent(
            action=action,
            actor=actor,
            before=before,
            after=after,
            reason_text=reason_text,
            detail=detail,
        ),
    )
