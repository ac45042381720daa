"""``manage.py sweep``: run every detection sweep once, now, and print what it opened."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError
from django.template.defaultfilters import pluralize

from reconciliation.casework.sweeps import sweep_all
from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.stores import every_store, home_store


class Command(BaseCommand):
    help = "Run the stuck-claim sweep and the re-check of open cases once."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = sweep_all(every_store(), home=home_store)
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(describe_connection_problem(exc, regions()[0])) from None
        for line in report.lines():
            self.stdout.write(line)
        if report.errors:
            failed = len(report.errors)
            raise CommandError(f"{failed} claim{pluralize(failed)} could not be swept")
