"""``manage.py webhook_sink --port N --secret S [--secret S2 …] [--secret-file F]``
(docs/webhooks.md): a receiver for development and tests, on loopback, until stopped.
It verifies signatures against every secret given (the file's, one a line, read again
when it changes: an endpoint's secret is rotated without restarting it), processes
each ``webhook-id`` once and counts deliveries and duplicates (``GET /stats``); told to,
it answers 500, times out, or answers slowly, after processing, on every delivery
(``--misbehave``) or at random rates (``--fail-rate`` …, reproducible with ``--seed``)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

from reconciliation.management.arguments import finite_number, seed_number, whole_number
from reconciliation.simulation.webhook_sink import (
    FaultRates,
    Misbehaviour,
    SinkSecrets,
    SinkState,
    sink_server,
)


class Command(BaseCommand):
    help = "Receive acknowledgement webhooks on loopback: verify, deduplicate, count."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=whole_number(0, 65535), required=True)
        parser.add_argument(
            "--secret",
            action="append",
            default=[],
            help="an accepted whsec_… secret; give it twice during a rotation (old and new)",
        )
        parser.add_argument(
            "--secret-file",
            type=Path,
            help="a file of accepted secrets, one a line, read again when it changes "
            "(make run's, under var/: not in the process list)",
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
            type=whole_number(0, 1_000_000_000),
            default=0,
            help="misbehave on this many deliveries, then behave (default 0: on all)",
        )
        parser.add_argument(
            "--delay",
            type=finite_number(0, 3600),
            default=30.0,
            help="seconds held by the timeouts and slow",
        )
        # Random faults per delivery (the reliability run, docs/reliability.md): together
        # at most 1; a delivery --misbehave already misbehaves on draws none.
        parser.add_argument(
            "--fail-rate",
            type=finite_number(0, 1),
            default=0.0,
            help="share answered 500, after processing",
        )
        parser.add_argument(
            "--timeout-after-processing-rate",
            type=finite_number(0, 1),
            default=0.0,
            help="share processed, then held --delay seconds unanswered (a lost answer)",
        )
        parser.add_argument(
            "--timeout-before-processing-rate",
            type=finite_number(0, 1),
            default=0.0,
            help="share held --delay seconds unanswered and not processed",
        )
        parser.add_argument(
            "--seed", type=seed_number, default=None, help="seed of the random faults"
        )

    def handle(
        self, *args: Any, port: int, secret: list[str], secret_file: Path | None, **options: Any
    ) -> None:
        secrets = SinkSecrets(given=tuple(secret), file=secret_file)
        if secret_file is not None and not secret_file.is_file():
            raise CommandError(f"--secret-file {secret_file}: no such file")
        if not secrets.current():
            raise CommandError("give --secret (once or more) or --secret-file")
        for key in secrets.current():
            try:
                Webhook(key)
            except (EmptyWebhookSecretError, ValueError) as exc:
                raise CommandError(f"a secret is not a whsec_… secret: {exc}") from None
        try:
            rates = FaultRates(
                fail=options["fail_rate"],
                timeout_after=options["timeout_after_processing_rate"],
                timeout_before=options["timeout_before_processing_rate"],
            )
        except ValueError as exc:
            raise CommandError(f"fault rates: {exc}") from exc
        state = SinkState(
            secrets=secrets,
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
