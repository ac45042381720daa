"""``manage.py verify_export FILE MANIFEST``: check an audit export against its signed
manifest offline (no DynamoDB): signature, SHA-256, size, row count, first and last
event and the chain heads; for JSON Lines also every event's own hash. Exit 0 when all
match, otherwise one line per mismatch and exit 1; a file that is not UTF-8 or a manifest
that is not a JSON object is a ``CommandError`` saying so (exit 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.audit.export.verify import ExportUnreadable, export_verify_offline


class Command(BaseCommand):
    help = "Check an audit export file against its signed manifest, offline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument("manifest")

    def handle(self, *args: Any, file: str, manifest: str, **options: Any) -> None:
        for path in (file, manifest):
            if not Path(path).is_file():
                raise CommandError(f"{path}: no such file")
        try:
            problems = export_verify_offline(Path(file), Path(manifest))
        except ExportUnreadable as exc:
            raise CommandError(str(exc)) from exc
        for line in problems:
            self.stdout.write(line)
        if problems:
            sys.exit(1)
        self.stdout.write(f"OK {file} matches {manifest}")
