"""``manage.py ddb_setup``: create missing tables, indexes and TTL; a no-op when all exist."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError

from reconciliation.dynamo.client import dynamodb_client, regions, table_names
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.dynamo.tables import ensure_tables


class Command(BaseCommand):
    help = "Create the DynamoDB tables, indexes and TTL settings that are missing."

    def handle(self, *args, **options) -> None:
        names = table_names()
        for region in regions():
            try:
                done = ensure_tables(dynamodb_client(region), names)
            except (BotoCoreError, ClientError) as exc:
                raise CommandError(describe_connection_problem(exc, region)) from None
            where = region.endpoint_url or f"AWS {region.name}"
            if not done:
                self.stdout.write(f"{where}: nothing to do; all tables, indexes and TTL exist")
            for line in done:
                self.stdout.write(f"{where}: {line}")
