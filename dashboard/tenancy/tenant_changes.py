"""Changes to tenants, their funds and API tokens, each with its audit event on
``TENANT#name`` (reconciliation.audit.tenants), appended first inside the database
transaction that makes the change: a change the audit trail refused is rolled back.

One place for the administration screen (dashboard/tenancy/admin.py) and the commands
(``issue_api_token``, ``revoke_api_token``, ``add_fund``), so both leave the same trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from dashboard.tenancy.models import (
    MAX_LIVE_TOKENS,
    ApiToken,
    Fund,
    Tenant,
    WebhookEndpoint,
    default_funds,
)
from reconciliation import clock
from reconciliation.acks import models as ack_models
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.tenants import tenant_event_append
from reconciliation.claims import funds as fund_rules
from reconciliation.stores import first_store


def fund_snapshot(fund: Fund | fund_rules.Fund) -> dict[str, str]:
    max_amount = fund.max_amount
    if isinstance(max_amount, Decimal):
        max_amount = max_amount.normalize()
    rule = fund_rules.Fund(code=fund.code, currency=fund.currency, max_amount=max_amount)
    return {"fund": rule.code, "currency": rule.currency, "max_amount": rule.max_amount_text}


def tenant_event(
    tenant: str,
    action: AuditAction,
    *,
    actor: Actor,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    event = AuditEvent(action=action, actor=actor, before=before, after=after, detail=detail)
    tenant_event_append(first_store(), tenant=tenant, event=event)


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


class TooManyLiveTokens(Exception):
    """The tenant holds ``MAX_LIVE_TOKENS`` live tokens already: nothing was issued."""

    def __init__(self, tenant: str, hints: list[str]):
        self.tenant, self.hints = tenant, hints
        super().__init__(
            f"tenant {tenant} already has {len(hints)} live tokens "
            f"({', '.join('…' + h for h in hints)}), the most a rotation needs: revoke the "
            "old one once its callers use the new one (revoke_api_token --hint), then issue"
        )


def token_issue(
    name: str, *, actor: Actor, expires_in: timedelta | None = None
) -> tuple[ApiToken, str]:
    """A new API token for ``name`` (the tenant created first if new); the raw token is
    returned once, and only its last characters reach the audit trail. Refused with
    ``TooManyLiveTokens`` when the tenant holds ``MAX_LIVE_TOKENS`` live ones: a third is
    never issued, and none is revoked silently (a caller would be cut off unannounced)."""
    with transaction.atomic():
        tenant = tenant_provision(name, actor=actor)
        # The tenant's row, locked: two issues at once count one after the other.
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
        live = list(ApiToken.objects.live().filter(tenant=name).order_by("pk"))
        if len(live) >= MAX_LIVE_TOKENS:
            raise TooManyLiveTokens(name, [t.hint for t in live])
        token, raw = ApiToken.issue(name, expires_in=expires_in)
        detail = {"hint": token.hint, "issued_at": token.created_at.isoformat()}
        if token.expires_at is not None:
            detail["expires_at"] = token.expires_at.isoformat()
        tenant_event(name, AuditAction.API_TOKEN_ISSUED, actor=actor, detail=detail)
        return token, raw


@dataclass(frozen=True)
class DeliveryLimits:
    """How hard the dispatchers may press one endpoint: deliveries in flight at once,
    and deliveries a second (``None``: no rate limit)."""

    max_in_flight: int = ack_models.DEFAULT_MAX_IN_FLIGHT
    rate_per_s: float | None = None


def webhook_register(
    name: str,
    url: str,
    *,
    events: tuple[str, ...],
    actor: Actor,
    secret: str = "",
    limits: DeliveryLimits | None = None,
) -> WebhookEndpoint:
    """Register an acknowledgement endpoint for ``name`` (the tenant created first if
    new) with a new signing secret, returned on the row once (or ``secret``: one
    receiver's for several tenants), and ``limits`` (the defaults if ``None``); the audit
    event names the URL, the events, the delivery limits and the secret's last
    characters, never the secret."""
    limits = limits or DeliveryLimits()
    with transaction.atomic():
        tenant = tenant_provision(name, actor=actor)
        endpoint = WebhookEndpoint(
            tenant=tenant,
            url=url,
            events=",".join(events),
            secret=secret or ack_models.secret_new(),
            max_in_flight=limits.max_in_flight,
            rate_per_s=limits.rate_per_s,
        )
        endpoint.full_clean(exclude=["tenant", "url", "events", "secret"])
        tenant_event(
            name,
            AuditAction.WEBHOOK_ADDED,
            actor=actor,
            after={
                "url": url,
                "events": list(events),
                "secret": endpoint.secret_hint,
                **_limits(endpoint),
            },
        )
        endpoint.save()
        return endpoint


def _limits(endpoint: WebhookEndpoint) -> dict[str, object]:
    """The delivery limits as the audit event keeps them (the rate as text: DynamoDB
    numbers are decimals, never floats)."""
    rate = endpoint.rate_per_s
    return {
        "max_in_flight": endpoint.max_in_flight,
        "rate_per_s": None if rate is None else f"{rate:g}",
    }


def webhook_limits_set(
    endpoint_id: int, *, max_in_flight: int, rate_per_s: float | None, actor: Actor
) -> WebhookEndpoint | None:
    """Set the endpoint's delivery limits (the admin), audited with the limits before and
    after; ``None``: no such endpoint. Out of bounds: ``ValidationError``, nothing
    written. The dispatchers read them at their next pass."""
    with transaction.atomic():
        row = (
            WebhookEndpoint.objects.select_for_update()
            .select_related("tenant")
            .filter(pk=endpoint_id)
            .first()
        )
        if row is None:
            return None
        before = _limits(row)
        row.max_in_flight, row.rate_per_s = max_in_flight, rate_per_s
        row.full_clean(exclude=["tenant", "url", "events", "secret"])
        tenant_event(
            row.tenant.name,
            AuditAction.WEBHOOK_LIMITS_SET,
            actor=actor,
            before={"url": row.url, **before},
            after={"url": row.url, **_limits(row)},
            detail={"endpoint": f"E{row.pk}"},
        )
        row.save(update_fields=["max_in_flight", "rate_per_s"])
        return row


def webhook_secret_rotate(endpoint_id: int, *, actor: Actor) -> WebhookEndpoint | None:
    """Give the endpoint ``endpoint_id`` a new signing secret, returned on the row once
    (``None``: no such endpoint). The secret it replaces stays valid for
    ``WEBHOOK_PREVIOUS_SECRET_S`` and deliveries are signed with both meanwhile; a
    previous secret still valid from an earlier rotation is dropped (one rotation at a
    time). The audit event names both secrets' last characters, never a secret."""
    with transaction.atomic():
        # The row, locked: two rotations at once each replace the other's new secret.
        row = (
            WebhookEndpoint.objects.select_for_update()
            .select_related("tenant")
            .filter(pk=endpoint_id)
            .first()
        )
        if row is None:
            return None
        until = clock.now() + timedelta(seconds=settings.WEBHOOK_PREVIOUS_SECRET_S)
        before_hint = row.secret_hint
        row.previous_secret, row.previous_secret_until = row.secret, until
        row.secret = ack_models.secret_new()
        tenant_event(
            row.tenant.name,
            AuditAction.WEBHOOK_SECRET_ROTATED,
            actor=actor,
            before={"url": row.url, "secret": before_hint},
            after={"url": row.url, "secret": row.secret_hint},
            detail={"endpoint": f"E{row.pk}", "previous_valid_until": until.isoformat()},
        )
        row.save(update_fields=["secret", "previous_secret", "previous_secret_until"])
        return row


def webhook_keep(
    name: str, url: str, *, secret: str, events: tuple[str, ...], actor: Actor
) -> tuple[WebhookEndpoint, bool]:
    """The enabled endpoint of ``name`` at ``url`` signing with ``secret`` (``make run``'s
    development receiver, whose secret it keeps under var/), or one registered now (and
    audited) when there is none, with ``secret`` when one is given, else a new one:
    ``(endpoint, registered)``. A restart finds its own registration and adds no second
    one."""
    if secret:
        kept = WebhookEndpoint.objects.filter(
            tenant__name=name, url=url, secret=secret, enabled=True
        ).first()
        if kept is not None:
            return kept, False
    return webhook_register(name, url, events=events, actor=actor, secret=secret), True


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


def _limit_snapshot(rate_per_s: float | None, burst: int | None) -> dict[str, str | int | None]:
    # The rate as text: DynamoDB numbers are exact decimals, and a float is refused.
    return {"rate_per_s": None if rate_per_s is None else f"{rate_per_s:g}", "burst": burst}


def tenant_intake_limit_set(
    tenant: Tenant, *, rate_per_s: float | None, burst: int | None, actor: Actor
) -> bool:
    """Set ``tenant``'s intake rate limit (``None``: the settings' default); ``False``
    when it was already so (nothing written). Applies from the next request."""
    with transaction.atomic():
        before = _limit_snapshot(tenant.intake_rate_per_s, tenant.intake_burst)
        after = _limit_snapshot(rate_per_s, burst)
        if before == after:
            return False
        tenant_event(
            tenant.name, AuditAction.INTAKE_LIMIT_CHANGED, actor=actor, before=before, after=after
        )
        tenant.intake_rate_per_s, tenant.intake_burst = rate_per_s, burst
        tenant.save(update_fields=["intake_rate_per_s", "intake_burst"])
        return True


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


def tenant_funds_complete(
    name: str, funds: list[fund_rules.Fund], *, actor: Actor
) -> list[fund_rules.Fund]:
    """The tenant ``name`` (created if new) with every fund of ``funds`` registered: the
    ones it lacks are registered (each with its event), the ones it has are left as they
    are, limits included (someone may have changed them). Returns the ones registered."""
    with transaction.atomic():
        tenant = tenant_provision(name, actor=actor)
        have = set(Fund.objects.filter(tenant=tenant).values_list("code", "currency"))
        missing = [f for f in funds if (f.code, f.currency) not in have]
        for fund in missing:
            fund_register(tenant, fund, actor=actor)
        return missing


def fund_remove(fund: Fund, *, actor: Actor) -> None:
    with transaction.atomic():
        tenant_event(
            fund.tenant.name, AuditAction.FUND_REMOVED, actor=actor, before=fund_snapshot(fund)
        )
        fund.delete()


def endpoints_watch(answered: dict[str, bool], *, actor: Actor) -> list[WebhookEndpoint]:
    """After a dispatch pass (``DispatchReport.answered``: endpoint id → whether any
    attempt was answered 2xx): an endpoint that answered clears its failing mark; one that
    did not is marked failing from now, and disabled, with its audit event (a system
    action), once it has failed every delivery for ``ACK_DISABLE_AFTER_S``. Its
    deliveries then wait (reconciliation/acks/dispatch.py); the overview tells supervisors.
    Returns the endpoints disabled now."""
    now = clock.now()
    disabled = []
    for endpoint_id, ok in answered.items():
        if not endpoint_id.startswith("E") or not endpoint_id[1:].isdigit():
            continue
        with transaction.atomic():
            row = (
                WebhookEndpoint.objects.select_for_update()
                .select_related("tenant")
                .filter(pk=int(endpoint_id[1:]))
                .first()
            )
            if row is None or not row.enabled:
                continue
            if ok:
                if row.failing_since is not None:
                    row.failing_since = None
                    row.save(update_fields=["failing_since"])
                continue
            if row.failing_since is None:
                row.failing_since = now
                row.save(update_fields=["failing_since"])
                continue
            if now - row.failing_since < timedelta(seconds=settings.ACK_DISABLE_AFTER_S):
                continue
            tenant_event(
                row.tenant.name,
                AuditAction.WEBHOOK_DISABLED,
                actor=actor,
                before={"url": row.url, "enabled": True},
                after={"url": row.url, "enabled": False},
                detail={"failing_since": row.failing_since.isoformat()},
            )
            row.enabled = False
            row.disabled_at = now
            row.save(update_fields=["enabled", "disabled_at"])
            disabled.append(row)
    return disabled
