"""``manage.py notify_supervisors``: send the supervisors' daily e-mail now (override
requests waiting, cases past their queue's SLA), as the beat task does each day."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError

from reconciliation.casework.notifications import digest_send
from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.stores import every_store


class Command(BaseCommand):
    help = "E-mail supervisors the override requests waiting and the cases past SLA, now."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            sent = digest_send(stores=every_store())
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(describe_connection_problem(exc, regions()[0])) from None
        self.stdout.write(sent.line())
