"""``manage.py issue_api_token --tenant NAME``: print a new API bearer token on the last line."""

from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from dashboard.models import ApiToken

TENANT_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Command(BaseCommand):
    help = "Issue an intake API bearer token for a tenant. Only its hash is stored."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True)

    def handle(self, *args, tenant: str, **options) -> None:
        if not TENANT_RE.match(tenant):
            raise CommandError("--tenant must be 1-64 letters, digits, '.', '_' or '-'")
        token, raw = ApiToken.issue(tenant)
        self.stdout.write(f"issued token …{token.hint} for tenant {tenant}; it is shown once:")
        self.stdout.write(raw)
