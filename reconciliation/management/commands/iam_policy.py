"""``manage.py iam_policy --account ID``: print the least-privilege IAM policy (JSON) of
this configuration: its table prefix and regions (reconciliation/dynamo/iam.py)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.dynamo.client import regions
from reconciliation.dynamo.iam import policy_document


class Command(BaseCommand):
    help = (
        "Print the IAM policy the configured tables and regions need: ddb_setup's table "
        "administration, serving, and backfill_cases's scans, as separate statements."
    )
    # It reads the configuration only; no engine or recorded configuration is needed.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--account", required=True, help="the AWS account id (12 digits)")

    def handle(self, *args: Any, account: str, **options: Any) -> None:
        try:
            document = policy_document(
                prefix=settings.DDB_TABLE_PREFIX,
                regions=[r.name for r in regions()],
                account=account,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(document, indent=2))
