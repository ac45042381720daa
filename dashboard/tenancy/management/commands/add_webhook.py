"""``manage.py add_webhook --tenant T URL [--events …] [--max-in-flight N] [--rate R]``
(docs/webhooks.md): register an acknowledgement endpoint for a tenant and print its
``whsec_…`` signing secret, once. ``--max-in-flight``: requests one dispatcher keeps open
to it at once (default 8); ``--rate``: deliveries a second per dispatcher (default: no
limit).

The URL must be ``https``, and every address its host resolves to public: private,
link-local and metadata addresses are refused (no request forgery into the network);
``http`` and loopback only with ``WEBHOOK_ALLOW_LOOPBACK`` (debug or demo). The
registration is an audit event on ``TENANT#T``; when the trail cannot be written,
nothing is registered.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.tenancy.management.commands.issue_api_token import TENANT_RE, not_recorded
from dashboard.tenancy.models import MAX_IN_FLIGHT_LIMIT, MAX_RATE_PER_S, MIN_RATE_PER_S
from dashboard.tenancy.tenant_changes import DeliveryLimits, webhook_register
from reconciliation.acks.addresses import UrlRefused, url_check
from reconciliation.acks.models import DEFAULT_EVENTS, DEFAULT_MAX_IN_FLIGHT, EventType
from reconciliation.actors import command_actor
from reconciliation.management.arguments import finite_number, whole_number


class Command(BaseCommand):
    help = "Register an acknowledgement webhook endpoint; prints its signing secret once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("url")
        parser.add_argument("--tenant", required=True)
        parser.add_argument(
            "--events",
            nargs="+",
            choices=[e.value for e in EventType],
            default=[e.value for e in DEFAULT_EVENTS],
            help="event types to send (default: pledge.recorded pledge.voided)",
        )
        parser.add_argument(
            "--max-in-flight",
            type=whole_number(1, MAX_IN_FLIGHT_LIMIT),
            default=DEFAULT_MAX_IN_FLIGHT,
            help=f"requests one dispatcher keeps open to it at once (1-{MAX_IN_FLIGHT_LIMIT})",
        )
        parser.add_argument(
            "--rate",
            type=finite_number(MIN_RATE_PER_S, MAX_RATE_PER_S),
            default=None,
            help="deliveries a second per dispatcher at most (default: no limit)",
        )

    def handle(
        self,
        *args: Any,
        url: str,
        tenant: str,
        events: list[str],
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        rate: float | None = None,
        **options: Any,
    ) -> None:
        if not TENANT_RE.match(tenant):
            raise CommandError("--tenant must be 1-64 letters, digits, '.', '_' or '-'")
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT_LIMIT:
            raise CommandError(f"--max-in-flight must be 1 to {MAX_IN_FLIGHT_LIMIT}")
        if rate is not None and not MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S:
            raise CommandError(f"--rate must be {MIN_RATE_PER_S} to {MAX_RATE_PER_S:g} a second")
        if len(url) > 2000:
            raise CommandError("the URL is longer than 2000 characters")
        try:
            url_check(url, allow_loopback=settings.WEBHOOK_ALLOW_LOOPBACK)
        except UrlRefused as exc:
            raise CommandError(f"refused: {exc}") from exc
        try:
            endpoint = webhook_register(
                tenant,
                url.strip(),
                events=tuple(dict.fromkeys(events)),
                actor=command_actor("add_webhook"),
                limits=DeliveryLimits(max_in_flight=max_in_flight, rate_per_s=rate),
            )
        except AUDIT_UNAVAILABLE as exc:
            raise not_recorded(exc) from exc
        rate_text = f"{endpoint.rate_per_s:g}/s" if endpoint.rate_per_s else "no rate limit"
        self.stdout.write(
            f"registered webhook {endpoint.url} for tenant {tenant} "
            f"({', '.join(endpoint.event_list())}; at most {endpoint.max_in_flight} "
            f"requests at once, {rate_text}); its signing secret is shown once:"
        )
        self.stdout.write(endpoint.secret)
