"""``manage.py verify_audit [--stream S] [--since DATE]``: recompute the hash chains,
compare each case and pledge stream with the head its item stores, check the signed
checkpoints and name every past period without one. Exit 0 only when everything holds;
otherwise one line per problem on stdout and exit 1.

Every region is verified: streams are found in every region's index and each stream, and
the case or pledge item that stores its head, is read in the region that owns it; the
checkpoints (one a period, covering every region) are read from the first region.

Streams are found without a Scan: through the ``by_day`` index, day by day from
``--since`` to today, plus every stream a checkpoint of those days lists (so a stream
deleted outright is still named) and every pledge a case event of those days names.
Each stream found is verified from its first event.

Without ``--since`` the start is the earliest day found cheaply: walking back from today
until 31 days in a row hold no event (at most 400 days), or the first checkpoint's day
if older. Checkpoints put an event in every period once they run, so the walk reaches
them; give ``--since`` for a quieter history before that.

What verification cannot catch, and for how long, is in ``docs/audit.md``.
"""

from __future__ import annotations

import sys
from datetime import date
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.audit.verify import VERIFY_LOOKBACK_DAYS, VERIFY_QUIET_DAYS, audit_verify
from reconciliation.dynamo.client import batch_patience
from reconciliation.management.arguments import whole_number
from reconciliation.stores import every_store


class Command(BaseCommand):
    help = (
        "Recompute every audit hash chain (gaps, hashes, links), compare case and pledge "
        "streams with the heads their items store, verify the signed checkpoints and name "
        "past periods without one. Without --since, starts at the earliest day found by "
        f"walking back until {VERIFY_QUIET_DAYS} empty days in a row (at most "
        f"{VERIFY_LOOKBACK_DAYS}), or at the first checkpoint if older."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--stream", help="verify this stream only, e.g. CASE#abc")
        parser.add_argument("--since", help="UTC day YYYY-MM-DD: streams touched since then")
        parser.add_argument("--threads", type=whole_number(1, 64), default=8)

    def handle(
        self,
        *args: Any,
        stream: str | None = None,
        since: str | None = None,
        threads: int = 8,
        **options: Any,
    ) -> None:
        try:
            since_day = date.fromisoformat(since) if since else None
        except ValueError:
            raise CommandError(f"--since {since!r} is not a date (YYYY-MM-DD)")
        try:
            stores = every_store(wait=batch_patience())
            report = audit_verify(
                store=stores[0], stores=stores, stream=stream, since=since_day, threads=threads
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        for line in report.problems:
            self.stdout.write(line)
        for line in report.warnings:  # not failures: said on stderr, the exit code holds
            self.stderr.write(f"warning: {line}")
        scope = f"stream {stream}" if stream else f"since {report.since}"
        summary = (
            f"{scope}: {report.streams} streams, {report.events} events, "
            f"{report.checkpoints} checkpoints"
        )
        if report.ok:
            self.stdout.write(f"OK {summary}")
            return
        self.stderr.write(f"FAILED {summary}: {len(report.problems)} problems")
        sys.exit(1)
