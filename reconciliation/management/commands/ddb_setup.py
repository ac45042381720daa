"""``manage.py ddb_setup``: create missing tables, indexes and TTL; a no-op when all exist.

It also records this configuration's fingerprint in every region where none is
(reconciliation/ops/config.py), and refuses, naming the fields, where a different one is
recorded, unless ``--accept-config``: the deliberate, audited step that replaces it."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.actors import command_actor
from reconciliation.dynamo.client import dynamodb_client, regions, table_names
from reconciliation.dynamo.errors import ErrorCode, describe_connection_problem
from reconciliation.dynamo.tables import ensure_tables
from reconciliation.ops.config import config_record


class Command(BaseCommand):
    help = (
        "Create the DynamoDB tables, indexes and TTL settings that are missing, and record "
        "this configuration in every region (--accept-config: replace a different one)."
    )
    # The system check refuses a configuration that differs from the recorded one; this
    # command is where that is reported, or deliberately accepted, so it runs regardless.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--accept-config",
            action="store_true",
            help="replace a different recorded configuration with this one (audited)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
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
        try:
            lines = config_record(accept=options["accept_config"], actor=command_actor("ddb_setup"))
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        except ClientError as exc:
            if exc.response["Error"]["Code"] != ErrorCode.CONDITION_FAILED:
                raise
            raise CommandError(
                "the recorded configuration changed while this ran: run ddb_setup again"
            ) from None
        for line in lines:
            self.stdout.write(line)
