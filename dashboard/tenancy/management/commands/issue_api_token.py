"""``manage.py issue_api_token --tenant NAME [--expires-in DAYS]``: print a new API bearer
token on the last line.

A tenant named for the first time is created with ``DEFAULT_FUNDS``. Both are audit
events on ``TENANT#NAME``; when the audit trail cannot be written, nothing is issued.
Without ``--expires-in`` the token lives until revoked (as every token issued before
expiry existed). A tenant holds at most two live tokens, the old and the new of a
rotation: a third is refused, naming the two.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenancy.tenant_changes import TooManyLiveTokens, token_issue
from reconciliation.actors import command_actor
from reconciliation.management.arguments import whole_number

TENANT_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def not_recorded(exc: Exception) -> CommandError:
    return CommandError(f"the audit trail could not be written ({exc}): nothing was changed")


class Command(BaseCommand):
    help = "Issue an intake API bearer token for a tenant. Only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument(
            "--expires-in",
            type=whole_number(1, 3650),
            metavar="DAYS",
            help="days until the token expires (default: never, until revoked)",
        )

    def handle(
        self, *args: Any, tenant: str, expires_in: int | None = None, **options: Any
    ) -> None:
        if not TENANT_RE.match(tenant):
            raise CommandError("--tenant must be 1-64 letters, digits, '.', '_' or '-'")
        try:
            token, raw = token_issue(
                tenant,
                actor=command_actor("issue_api_token"),
                expires_in=timedelta(days=expires_in) if expires_in is not None else None,
            )
        except TooManyLiveTokens as exc:
            raise CommandError(str(exc)) from exc
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        expiry = f", expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else ""
        self.stdout.write(
            f"issued token …{token.hint} for tenant {tenant}{expiry}; it is shown once:"
        )
        self.stdout.write(raw)
