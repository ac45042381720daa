"""Changes to tenants, their funds and API tokens, each with its audit event on
``TENANT#name`` (reconciliation.audit.tenants), appended first inside the database
transaction that makes the change: a change the audit trail refused is rolled back.

One place for the administration screen (dashboard/admin.py) and the commands
(``issue_api_token``, ``revoke_api_token``, ``add_fund``), so both leave the same trail.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from dashboard.models import ApiToken, Fund, Tenant, default_funds
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditAction
from reconciliation.audit.tenants import tenant_event_append
from reconciliation.claims import funds as fund_rules
from reconciliation.stores import first_store


def fund_snapshot(fund: Fund | fund_rules.Fund) -> dict:
    max_amount = fund.max_amount
    if isinstance(max_amount, Decimal):
        max_amount = max_amount.normalize()
    rule = fund_rules.Fund(code=fund.code, currency=fund.currency, max_amount=max_amount)
    return {"fund": rule.code, "currency": rule.currency, "max_amount": rule.max_amount_text}


def tenant_event(tenant: str, action: AuditAction, *, actor: Actor, **fields) -> None:
    tenant_event_append(first_store(), tenant=tenant, action=action, actor=actor, **fields)


def tenant_provision(name: str, *, actor: Actor) -> Tenant:
    """The tenant ``name``; created with ``DEFAULT_FUNDS`` (and its event) if new."""
    with transaction.atomic():
        existing = Tenant.objects.filter(name=name).first()
        if existing is not None:
            return existing
        funds = default_funds()
        tenant_event(
            name,
            AuditAction.TENANT_CREATED,
            actor=actor,
            after={"funds": [fund_snapshot(f) for f in funds]},
        )
        tenant = Tenant.objects.create(name=name)
        tenant.funds_register(funds)
        return tenant


def token_issue(name: str, *, actor: Actor) -> tuple[ApiToken, str]:
    """A new API token for ``name`` (the tenant created first if new); the raw token is
    returned once, and only its last characters reach the audit trail."""
    with transaction.atomic():
        tenant_provision(name, actor=actor)
        token, raw = ApiToken.issue(name)
        tenant_event(
            name,
            AuditAction.API_TOKEN_ISSUED,
            actor=actor,
            detail={"hint": token.hint, "issued_at": token.created_at.isoformat()},
        )
        return token, raw


def token_revoke(token: ApiToken, *, actor: Actor) -> bool:
    """Revoke ``token`` (the row stays); ``False`` if it was revoked already."""
    with transaction.atomic():
        if not token.is_active:
            return False
        tenant_event(
            token.tenant,
            AuditAction.API_TOKEN_REVOKED,
            actor=actor,
            detail={"hint": token.hint, "issued_at": token.created_at.isoformat()},
        )
        return token.revoke()


def fund_register(tenant: Tenant, fund: fund_rules.Fund, *, actor: Actor) -> tuple[Fund, bool]:
    """Register ``fund`` for ``tenant``, or change its largest single amount; returns the
    row and whether it was new. An unchanged fund writes nothing."""
    with transaction.atomic():
        existing = Fund.objects.filter(
            tenant=tenant, code=fund.code, currency=fund.currency
        ).first()
        if existing is None:
            tenant_event(
                tenant.name, AuditAction.FUND_REGISTERED, actor=actor, after=fund_snapshot(fund)
            )
        elif existing.max_amount != fund.max_amount:
            tenant_event(
                tenant.name,
                AuditAction.FUND_LIMIT_CHANGED,
                actor=actor,
                before=fund_snapshot(existing),
                after=fund_snapshot(fund),
            )
        (row,) = tenant.funds_register([fund])
        return row, existing is None


def fund_remove(fund: Fund, *, actor: Actor) -> None:
    with transaction.atomic():
        tenant_event(
            fund.tenant.name, AuditAction.FUND_REMOVED, actor=actor, before=fund_snapshot(fund)
        )
        fund.delete()
