"""``manage.py revoke_api_token (--hint H | --tenant NAME)``: revoke intake API tokens."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from dashboard.models import ApiToken


class Command(BaseCommand):
    help = "Revoke API tokens by their last characters (--hint) or all of a tenant's."

    def add_arguments(self, parser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--hint")
        group.add_argument("--tenant")

    def handle(self, *args, hint: str | None, tenant: str | None, **options) -> None:
        tokens = ApiToken.objects.active()
        tokens = tokens.filter(hint=hint) if hint else tokens.filter(tenant=tenant)
        count = tokens.update(revoked_at=timezone.now())
        if not count:
            raise CommandError("no active token matched")
        self.stdout.write(f"revoked {count} token(s)")
