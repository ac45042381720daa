"""Changes to a tenant as audit events: the tenant created, its funds registered, their
limits changed or removed, its API tokens issued and revoked, its intake rate limit set,
its webhook endpoints added, their signing secrets rotated, the endpoints disabled. One
stream per tenant, ``TENANT#{name}``, hash chained like every other (docs/design.md §7),
so an auditor reads who opened which fund to a caller, and when, in order.

Tenants live in Django's database; as for accounts (:mod:`.staff`), the caller appends
the event inside the database transaction that makes the change, first, so a change the
audit trail refused is rolled back rather than left unrecorded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reconciliation.audit.append import audit_event_append
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.stores import Store

TENANT_STREAM_PREFIX = "TENANT#"
TENANT_ACTIONS = frozenset(
    {
        AuditAction.TENANT_CREATED,
        AuditAction.FUND_REGISTERED,
        AuditAction.FUND_LIMIT_CHANGED,
        AuditAction.FUND_REMOVED,
        AuditAction.API_TOKEN_ISSUED,
        AuditAction.API_TOKEN_REVOKED,
        AuditAction.INTAKE_LIMIT_CHANGED,
        AuditAction.WEBHOOK_ADDED,
        AuditAction.WEBHOOK_SECRET_ROTATED,
        AuditAction.WEBHOOK_LIMITS_SET,
        AuditAction.WEBHOOK_DISABLED,
    }
)


def tenant_stream(name: str) -> str:
    return f"{TENANT_STREAM_PREFIX}{name}"


def tenant_event_append(store: Store, *, tenant: str, event: AuditEvent) -> dict[str, Any]:
    """Append ``event`` (one of ``TENANT_ACTIONS``) about the tenant ``tenant``, its
    detail naming the tenant; returns the event as stored."""
    if event.action not in TENANT_ACTIONS:
        raise ValueError(f"{event.action!r} is not a tenant action")
    return audit_event_append(
        store,
        stream=tenant_stream(tenant),
        event=replace(event, detail={"tenant": tenant, **(event.detail or {})}),
    )
