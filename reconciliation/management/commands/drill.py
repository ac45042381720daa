"""``manage.py drill``: the reconciliation drill; non-zero exit on any failed scenario."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.claims.intake import StoreUnavailable
from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.ops.drill import drill_run
from reconciliation.ops.drill_report import DrillStatus


class Command(BaseCommand):
    help = "Run the reconciliation drill against the configured DynamoDB and print a table."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print the report as JSON"
        )

    def handle(self, *args: Any, as_json: bool = False, **options: Any) -> None:
        try:
            report = drill_run()
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(describe_connection_problem(exc, regions()[0])) from None
        except StoreUnavailable as exc:
            raise CommandError(f"DynamoDB became unreachable during the drill ({exc})") from None
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            self.stdout.write(report.table())
            if report.unprovable:
                self.stdout.write(
                    "\nThis engine does not honour ClientRequestToken, so these scenarios "
                    "are not proven here: " + ", ".join(report.unprovable)
                )
        if not report.passed:
            failed = [r.scenario for r in report.rows if r.status == DrillStatus.FAIL]
            raise CommandError(f"drill failed: {', '.join(failed)}")
        self.stdout.write(f"\ndrill {report.run_id}: all provable scenarios passed")
