"""``manage.py revoke_api_token (--hint H | --tenant NAME)``: revoke intake API tokens.

Each revocation is an audit event on ``TENANT#NAME``; the rows stay, with ``revoked_at``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.template.defaultfilters import pluralize

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenancy.management.commands.issue_api_token import not_recorded
from dashboard.tenancy.models import ApiToken
from dashboard.tenancy.tenant_changes import token_revoke
from reconciliation.actors import command_actor


class Command(BaseCommand):
    help = "Revoke API tokens by their last characters (--hint) or all of a tenant's."

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--hint")
        group.add_argument("--tenant")

    def handle(self, *args: Any, hint: str | None, tenant: str | None, **options: Any) -> None:
        tokens = ApiToken.objects.active()
        tokens = tokens.filter(hint=hint) if hint else tokens.filter(tenant=tenant)
        actor = command_actor("revoke_api_token")
        count = 0
        try:
            for token in tokens.order_by("pk"):
                count += token_revoke(token, actor=actor)
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        if not count:
            raise CommandError("no active token matched")
        self.stdout.write(f"revoked {count} token{pluralize(count)}")
