"""``manage.py rotate_webhook_secret ENDPOINT`` (docs/webhooks.md): give an endpoint
(``7`` or ``E7``, as the Acknowledgements page and the audit trail name it) a new
``whsec_…`` signing secret and print it, once.

The secret it replaces stays valid for ``WEBHOOK_PREVIOUS_SECRET_S`` (a day): until then
every delivery is signed with both, so the receiver can be given the new one without a
delivery refused. The rotation is an audit event on ``TENANT#T``
(``webhook_secret_rotated``); when the trail cannot be written, nothing changes.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenancy.management.commands.issue_api_token import not_recorded
from dashboard.tenancy.tenant_changes import webhook_secret_rotate
from reconciliation import clock
from reconciliation.actors import command_actor

ENDPOINT_RE = re.compile(r"^E?(\d{1,18})$")


def endpoint_pk(text: str) -> int:
    """``7`` or ``E7`` as the row's primary key; anything else refused."""
    match = ENDPOINT_RE.match(text.strip())
    if match is None:
        raise CommandError(f"{text!r} is not an endpoint id (7 or E7)")
    return int(match.group(1))


class Command(BaseCommand):
    help = "Rotate a webhook endpoint's signing secret; prints the new one once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint", help="the endpoint's id: 7 or E7")

    def handle(self, *args: Any, endpoint: str, **options: Any) -> None:
        pk = endpoint_pk(endpoint)
        try:
            row = webhook_secret_rotate(pk, actor=command_actor("rotate_webhook_secret"))
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        if row is None:
            raise CommandError(f"no webhook endpoint E{pk}")
        until = clock.plain(row.previous_secret_until)
        self.stdout.write(
            f"rotated the signing secret of E{row.pk}, {row.url} (tenant {row.tenant.name}); "
            f"the previous one ({row.previous_secret_hint}) also signs until {until}. "
            "The new secret is shown once:"
        )
        self.stdout.write(row.secret)
