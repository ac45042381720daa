"""``manage.py set_intake_limit --tenant T (--rate R --burst B | --default)``: set a
tenant's intake rate limit (docs/security.md), or return it to ``INTAKE_RATE_PER_S`` /
``INTAKE_BURST``. An audit event on ``TENANT#T``; applies from the next request.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenancy.management.commands.issue_api_token import not_recorded
from dashboard.tenancy.models import Tenant
from dashboard.tenancy.tenant_changes import tenant_intake_limit_set
from reconciliation.actors import command_actor
from reconciliation.management.arguments import finite_number, whole_number


class Command(BaseCommand):
    help = "Set a tenant's intake rate limit (requests per second and burst)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument(
            "--rate", type=finite_number(0.001, 1_000_000), help="requests per second (refill)"
        )
        parser.add_argument(
            "--burst", type=whole_number(1, 1_000_000), help="requests accepted at once"
        )
        parser.add_argument(
            "--default", action="store_true", help="use INTAKE_RATE_PER_S / INTAKE_BURST"
        )

    def handle(
        self,
        *args: Any,
        tenant: str,
        rate: float | None,
        burst: int | None,
        default: bool,
        **options: Any,
    ) -> None:
        if default == (rate is not None or burst is not None):
            raise CommandError("give --rate and --burst, or --default")
        if not default and (rate is None or burst is None):
            raise CommandError("give both --rate and --burst")
        owner = Tenant.objects.filter(name=tenant).first()
        if owner is None:
            raise CommandError(f"no tenant {tenant}")
        try:
            changed = tenant_intake_limit_set(
                owner, rate_per_s=rate, burst=burst, actor=command_actor("set_intake_limit")
            )
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        limit = "the default" if default else f"{rate:g}/s, burst {burst}"
        self.stdout.write(
            f"tenant {tenant}: intake limit {limit}" + ("" if changed else " (unchanged)")
        )
