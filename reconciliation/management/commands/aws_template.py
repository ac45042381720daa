"""``manage.py aws_template``: print the CloudFormation template (JSON) of the tables,
from the definitions ``ddb_setup`` creates them from (reconciliation/dynamo/template.py)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from reconciliation.dynamo.tables import streams_by_default
from reconciliation.dynamo.template import cloudformation_template


class Command(BaseCommand):
    help = (
        "Print the CloudFormation template of the DynamoDB tables, indexes, TTL, streams, "
        "deletion protection and point-in-time recovery that ddb_setup creates."
    )
    # It reads the configuration only; no engine or recorded configuration is needed.
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        template = cloudformation_template(
            prefix=settings.DDB_TABLE_PREFIX, streams=streams_by_default()
        )
        self.stdout.write(json.dumps(template, indent=2))
