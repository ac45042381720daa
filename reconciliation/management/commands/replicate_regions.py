"""``manage.py replicate_regions [--lag-ms N|LOW-HIGH]``: the Global Tables stand-in
between the engines of ``DDB_REGIONS``, until SIGINT or SIGTERM (then exit 0 with a
ReplicationLatency summary). What it models: ``reconciliation/simulation/replicator.py``."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.dynamo.client import regions, table_names
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.management.arguments import whole_number
from reconciliation.simulation.replicator import Replicator
from reconciliation.simulation.replicator_lww import Lag
from reconciliation.simulation.replicator_streams import StreamsMissing


class Command(BaseCommand):
    help = "Replicate every table between the regions of DDB_REGIONS (a Global Tables stand-in)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--lag-ms",
            default="1000",
            help="delay before a change reaches the other regions: N, or LOW-HIGH drawn "
            "per change (default 1000)",
        )
        parser.add_argument(
            "--poll-ms",
            type=whole_number(1, 60_000),
            default=50,
            help="pause between idle stream reads",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            lag = Lag.parse(options["lag_ms"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        configured = regions()
        if len(configured) < 2:
            raise CommandError("DDB_REGIONS names one region: there is nothing to replicate")
        replicator = Replicator(
            configured, table_names(), lag=lag, poll_interval_s=options["poll_ms"] / 1000
        )
        region = configured[0]
        try:
            for tail in replicator.tails:
                region = configured[tail.rank]
                tail.refresh()
        except StreamsMissing as exc:
            raise CommandError(str(exc)) from None
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(describe_connection_problem(exc, region)) from None

        stop = threading.Event()

        def _stop(signum: int, _frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        self.stdout.write(
            f"replicate_regions: {len(replicator.tails)} streams in "
            f"{', '.join(r.name for r in configured)}; lag {lag} ms"
        )
        self.stdout.flush()
        replicator.run(stop)
        replicator.close()
        for line in replicator.stats.summary_lines():
            self.stdout.write(line)
        self.stdout.write(
            f"replicate_regions: stopped; {replicator.records_read} records read, "
            f"{replicator.writes} writes, {replicator.resolver.echoes_dropped} own writes "
            f"dropped, {replicator.resolver.conflicts_lost} conflicts lost"
        )
