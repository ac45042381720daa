"""``manage.py issue_api_token --tenant NAME``: print a new API bearer token on the last line.

A tenant named for the first time is created with ``DEFAULT_FUNDS``. Both are audit
events on ``TENANT#NAME``; when the audit trail cannot be written, nothing is issued.
"""

from __future__ import annotations

import getpass
import re

from django.core.management.base import BaseCommand, CommandError

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenant_changes import token_issue
from reconciliation.actors import Actor, Role

TENANT_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def command_actor(command: str) -> Actor:
    """The system, acting through ``manage.py command`` run by this OS user."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = "unknown"
    return Actor(username="system", role=Role.SYSTEM, address=f"manage.py {command} ({who})")


def not_recorded(exc: Exception) -> CommandError:
    return CommandError(f"the audit trail could not be written ({exc}): nothing was changed")


class Command(BaseCommand):
    help = "Issue an intake API bearer token for a tenant. Only its hash is stored."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True)

    def handle(self, *args, tenant: str, **options) -> None:
        if not TENANT_RE.match(tenant):
            raise CommandError("--tenant must be 1-64 letters, digits, '.', '_' or '-'")
        try:
            token, raw = token_issue(tenant, actor=command_actor("issue_api_token"))
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        self.stdout.write(f"issued token …{token.hint} for tenant {tenant}; it is shown once:")
        self.stdout.write(raw)
