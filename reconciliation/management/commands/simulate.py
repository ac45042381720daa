"""``manage.py simulate --pledges N [--faults …] [--seed S]``: synthetic traffic with faults."""

from __future__ import annotations

import sys
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import describe_connection_problem
from reconciliation.management.arguments import finite_number, seed_number, whole_number
from reconciliation.simulation.faults import parse_faults
from reconciliation.simulation.simulate import SimulationConfig, simulate_run, summary_lines

DEFAULT_FAULTS = "ambiguous=0.03,ambiguous_no_commit=0.01,throttle=0.05,crash=0.01,conflict=0.05"


class Command(BaseCommand):
    help = "Send synthetic pledges with injected faults through the service layer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pledges", type=whole_number(1, 1_000_000), required=True)
        parser.add_argument(
            "--faults",
            default=DEFAULT_FAULTS,
            help=f"name=probability,… (default {DEFAULT_FAULTS}; '' for none)",
        )
        parser.add_argument("--seed", type=seed_number, default=None)
        parser.add_argument("--threads", type=whole_number(1, 64), default=8)
        parser.add_argument(
            "--peak-rps",
            type=finite_number(0.001, 1_000_000),
            default=50.0,
            help="peak new pledges/s to size the WCU budget for (duplicates on top)",
        )
        parser.add_argument(
            "--rate",
            type=finite_number(0.001, 1_000_000),
            default=None,
            help="new intents a second at most, a steady load (default: as fast as it goes)",
        )

    def handle(
        self,
        *args: Any,
        pledges: int,
        faults: str,
        seed: int | None,
        threads: int,
        peak_rps: float,
        rate: float | None = None,
        **options: Any,
    ) -> None:
        try:
            probabilities = parse_faults(faults)
        except ValueError as exc:
            raise CommandError(f"--faults: {exc}") from None
        config = SimulationConfig(
            pledges=pledges,
            faults=probabilities,
            seed=seed,
            threads=threads,
            peak_rps=peak_rps,
            rate_per_s=rate,
        )
        bar = tqdm(total=pledges, unit="intent", disable=not sys.stderr.isatty(), file=sys.stderr)
        try:
            report = simulate_run(config, progress=bar.update)
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(describe_connection_problem(exc, regions()[0])) from None
        finally:
            bar.close()
        for line in summary_lines(report, config):
            self.stdout.write(line)
        if not report.ledger_ok:
            raise CommandError("the ledger does not equal the recorded pledges")
