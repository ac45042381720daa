"""``manage.py backfill_cases``: give older cases the attributes the
search, resolved list and amount totals read (see ``reconciliation/cases/backfill.py``),
and older pledges their folded donor key
(``reconciliation/claims/backfill.py``). Safe to run again; a maintenance command, never
a request path."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError

from reconciliation.cases.backfill import cases_backfill
from reconciliation.claims.backfill import pledges_backfill
from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.stores import every_store


class Command(BaseCommand):
    help = (
        "Add donor_ref, donor_key, resolved-list keys and amount totals to cases written "
        "before them, and donor_key to older pledges."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            for store in every_store():
                for line in cases_backfill(store).lines() + pledges_backfill(store).lines():
                    self.stdout.write(line)
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(describe_connection_problem(exc, regions()[0])) from None
