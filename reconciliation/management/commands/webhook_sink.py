"""``manage.py webhook_sink --port N --secret S`` (docs/webhooks.md): a receiver for
development and tests, on loopback, until stopped. It verifies signatures, processes
each ``webhook-id`` once and counts deliveries and duplicates (``GET /stats``); told to,
it answers 500, times out, or answers slowly, after processing, on every delivery
(``--misbehave``) or at random rates (``--fail-rate`` …, reproducible with ``--seed``)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.acks.sink import FaultRates, Misbehaviour, SinkState, sink_server


class Command(BaseCommand):
    help = "Receive acknowledgement webhooks on loopback: verify, deduplicate, count."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, required=True)
        secret = parser.add_mutually_exclusive_group(required=True)
        secret.add_argument("--secret", help="the endpoint's whsec_… secret")
        secret.add_argument(
            "--secret-file",
            help="a file holding the secret (make run's, under var/: not in the process list)",
        )
        parser.add_argument(
            "--misbehave",
            choices=[m.value for m in Misbehaviour],
            default=Misbehaviour.NONE.value,
            help="after processing: answer 500, time out, or answer slowly; timeout-before: "
            "time out without processing",
        )
        parser.add_argument(
            "--misbehave-count",
            type=int,
            default=0,
            help="misbehave on this many deliveries, then behave (default 0: on all)",
        )
        parser.add_argument(
            "--delay", type=float, default=30.0, help="seconds held by the timeouts and slow"
        )
        # Random faults per delivery (the reliability run, docs/reliability.md): together
        # at most 1; a delivery --misbehave already misbehaves on draws none.
        parser.add_argument(
            "--fail-rate", type=float, default=0.0, help="share answered 500, after processing"
        )
        parser.add_argument(
            "--timeout-after-processing-rate",
            type=float,
            default=0.0,
            help="share processed, then held --delay seconds unanswered (a lost answer)",
        )
        parser.add_argument(
            "--timeout-before-processing-rate",
            type=float,
            default=0.0,
            help="share held --delay seconds unanswered and not processed",
        )
        parser.add_argument("--seed", type=int, default=None, help="seed of the random faults")

    def handle(self, *args: Any, port: int, secret: str | None, **options: Any) -> None:
        if secret is None:
            secret = Path(options["secret_file"]).read_text().strip()
        try:
            rates = FaultRates(
                fail=options["fail_rate"],
                timeout_after=options["timeout_after_processing_rate"],
                timeout_before=options["timeout_before_processing_rate"],
            )
        except ValueError as exc:
            raise CommandError(f"fault rates: {exc}") from exc
        state = SinkState(
            secret=secret,
            misbehave=Misbehaviour(options["misbehave"]),
            misbehave_count=options["misbehave_count"],
            delay_s=options["delay"],
            rates=rates,
            rng=random.Random(options["seed"]),
        )
        server = sink_server(state, port)
        self.stdout.write(f"webhook_sink: listening on 127.0.0.1:{server.server_port}")
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
