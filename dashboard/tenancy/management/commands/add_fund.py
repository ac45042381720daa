"""``manage.py add_fund --tenant T CODE [--currency C] [--max-amount A]`` (docs/design.md §11):
register a fund for a tenant, or change the largest single amount of one registered.

A tenant named for the first time is created with ``DEFAULT_FUNDS`` first. Each change
is an audit event on ``TENANT#T``; when the trail cannot be written, nothing changes. The currency
defaults to ``FUND_DEFAULT_CURRENCY`` and the largest single amount, for a new fund, to
``FUND_DEFAULT_MAX_AMOUNT``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenancy.management.commands.issue_api_token import TENANT_RE, not_recorded
from dashboard.tenancy.models import Fund
from dashboard.tenancy.tenant_changes import fund_register, tenant_provision
from reconciliation.actors import command_actor
from reconciliation.claims.funds import fund_parse


class Command(BaseCommand):
    help = "Register a fund (code, currency, largest single amount) for a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("code")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--currency", help="ISO 4217 code (default FUND_DEFAULT_CURRENCY)")
        parser.add_argument(
            "--max-amount",
            help="largest single amount, in the currency's major units "
            "(default FUND_DEFAULT_MAX_AMOUNT for a new fund; unchanged for an existing one)",
        )

    def handle(
        self,
        *args: Any,
        code: str,
        tenant: str,
        currency: str | None,
        max_amount: str | Decimal | None,
        **options: Any,
    ) -> None:
        if not TENANT_RE.match(tenant):
            raise CommandError("--tenant must be 1-64 letters, digits, '.', '_' or '-'")
        currency = currency or settings.FUND_DEFAULT_CURRENCY
        actor = command_actor("add_fund")
        try:
            with transaction.atomic():
                owner = tenant_provision(tenant, actor=actor)
                existing = Fund.objects.filter(
                    tenant=owner, code=code.strip().upper(), currency=currency.strip().upper()
                ).first()
                if max_amount is None:
                    max_amount = (
                        existing.max_amount if existing else settings.FUND_DEFAULT_MAX_AMOUNT
                    )
                try:
                    fund = fund_parse(code, currency, max_amount)
                except ValueError as exc:
                    raise CommandError(str(exc)) from exc
                row, _ = fund_register(owner, fund, actor=actor)
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        verb = "updated" if existing else "registered"
        self.stdout.write(
            f"{verb} fund {row.code} in {row.currency} for tenant {tenant}: "
            f"largest single amount {fund.max_amount_text}"
        )
