"""``manage.py export_audit --since … --until … --format csv|jsonl --out FILE``: export the
audit trail of a time range (UTC days ``YYYY-MM-DD`` or ISO date-times) with a progress
bar on a terminal, the signed manifest beside it (``FILE.manifest.json``) and an
``EXPORT#{id}`` event recording who exported what.

Every region is read (merged by time, each event once); the ``EXPORT#`` event is written
in the first region. ``--user`` exports as a staff user (their role applies: finance
staff get their own events only); without it the actor is ``cli:<os user>`` with the
system role.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from reconciliation.actors import Actor, Role, staff_role
from reconciliation.audit.export.delivery import export_to_file, manifest_path_for
from reconciliation.audit.export.rows import FORMATS
from reconciliation.audit.export.run import ExportAsk
from reconciliation.audit.filters import AuditFilters, FilterAsk, FilterError
from reconciliation.audit.staff import staff_spellings
from reconciliation.cases.policy import audit_visible_performer
from reconciliation.dynamo.client import batch_patience
from reconciliation.stores import every_store


class Command(BaseCommand):
    help = "Export audit events of a time range to CSV or JSON Lines, with a signed manifest."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", required=True, help="YYYY-MM-DD or ISO date-time (UTC)")
        parser.add_argument("--until", default="", help="YYYY-MM-DD or ISO date-time; today")
        parser.add_argument("--format", dest="fmt", choices=FORMATS, default="csv")
        parser.add_argument("--out", required=True, help="file to write")
        parser.add_argument("--actor-filter", default="", help="username or e-mail")
        parser.add_argument("--action", default="")
        parser.add_argument("--case-id", default="")
        parser.add_argument("--intent-id", default="")
        parser.add_argument("--user", default="", help="export as this staff user")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **o: Any) -> None:
        actor, performed_by = self._actor(o["user"])
        try:
            filters = AuditFilters.build(
                FilterAsk(
                    since=o["since"],
                    until=o["until"],
                    actor=o["actor_filter"],
                    action=o["action"],
                    case_id=o["case_id"],
                    intent_id=o["intent_id"],
                ),
                actor_spellings=staff_spellings(o["actor_filter"]),
                performed_by=performed_by,
                max_days=None,
            )
        except FilterError as exc:
            raise CommandError(str(exc))
        out = Path(o["out"])
        if not out.parent.is_dir():
            raise CommandError(f"{out.parent}: no such directory")
        show = not o["no_progress"] and sys.stderr.isatty()
        bar = tqdm(
            total=100,
            disable=not show,
            file=sys.stderr,
            desc="export",
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}",
        )

        def progress(rows: int, fraction: float) -> None:
            bar.n = round(fraction * 100, 1)
            bar.set_postfix_str(f"{rows:,} events", refresh=False)
            bar.refresh()

        stores = every_store(wait=batch_patience())
        try:
            core = export_to_file(
                ExportAsk(filters, o["fmt"], actor, store=stores[0], stores=stores),
                out_path=out,
                progress=progress,
                delivery="cli",
            )
        finally:
            bar.close()
        self.stdout.write(
            f"{core['row_count']} events -> {out} ({core['bytes']} bytes, sha256 "
            f"{core['sha256']}); manifest {manifest_path_for(out)}; export id {core['export_id']}"
        )

    def _actor(self, username: str) -> tuple[Actor, str]:
        if not username:
            return Actor(username=f"cli:{getpass.getuser()}", role=Role.SYSTEM), ""
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        role = staff_role(user.groups.values_list("name", flat=True)) if user else None
        if user is None or role is None:
            raise CommandError(f"{username}: no such staff user")
        actor = Actor(username=user.get_username(), role=role, email=user.email or "")
        return actor, audit_visible_performer(role, actor.username)
