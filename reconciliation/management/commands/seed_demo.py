"""``manage.py seed_demo``: fill a demo system so every queue of the dashboard has cases.

Synthetic, fictional records only. Refuses to run unless ``DEMO_MODE=1``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseError
from reconciliation.cases.vocabulary import CaseType, Disposition, Override, ReasonCode
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.overrides import override_request
from reconciliation.casework.selectors import queue_page
from reconciliation.management.arguments import whole_number
from reconciliation.ops.drill import drill_run
from reconciliation.simulation.simulate import SimulationConfig, simulate_run, summary_lines
from reconciliation.stores import case_store, every_store

DEMO_STAFF = Actor(
    username="staff", role=Role.FINANCE_STAFF, email="staff@example.org", address="demo-seed"
)


class Command(BaseCommand):
    help = "Seed demo data: a simulate run with faults, a drill, escalations, a request."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pledges", type=whole_number(1, 100_000), default=300)

    def handle(self, *args: Any, pledges: int, **options: Any) -> None:
        if os.environ.get("DEMO_MODE") != "1":
            raise CommandError("seed_demo writes synthetic data; it runs only with DEMO_MODE=1")
        config = SimulationConfig(
            pledges=pledges,
            faults={
                "ambiguous_after_commit": 0.03,
                "ambiguous_no_commit": 0.03,
                "crash_after_claim": 0.03,
                "throttle": 0.05,
                "transaction_conflict": 0.08,
            },
            seed=2026,
            late_worker_ratio=0.02,
        )
        # The faults are the point of the demo: their expected warnings would bury the
        # summary, so the seed prints the summary instead.
        logging.getLogger("reconciliation").setLevel(logging.ERROR)
        report = simulate_run(config)
        for line in summary_lines(report, config)[:6]:
            self.stdout.write(line)
        drill = drill_run()
        self.stdout.write(f"drill {drill.run_id}: {'passed' if drill.passed else 'FAILED'}")
        self._human_touches()

    def _human_touches(self) -> None:
        """Escalate two cases and ask for an override, so those queues are not empty."""
        # Listed over every region; each action acts in the region its case lives in.
        stuck = queue_page(CaseType.STUCK_PENDING, limit=3, stores=every_store()).rows
        mismatched = queue_page(CaseType.TOKEN_MISMATCH, limit=2, stores=every_store()).rows
        for row in stuck[:1] + mismatched[:1]:
            try:
                case_dispose(
                    store=case_store(row.case_id),
                    case_id=row.case_id,
                    disposition=Disposition.ESCALATE,
                    staff=StaffAction(
                        actor=DEMO_STAFF,
                        reason_code=ReasonCode.NEEDS_REVIEW,
                        reason_text="Demo: needs a second look before closing.",
                        seen_version=row.version,
                    ),
                )
            except CaseError as exc:
                self.stderr.write(f"could not escalate {row.case_id}: {exc}")
        for row in stuck[1:2]:
            try:
                override_request(
                    store=case_store(row.case_id),
                    case_id=row.case_id,
                    override=Override.RELEASE_CLAIM,
                    staff=StaffAction(
                        actor=DEMO_STAFF,
                        reason_code=ReasonCode.CLIENT_CONFIRMED,
                        reason_text="Demo: the client says the request never "
                        "reached them; let them retry.",
                        seen_version=row.version,
                    ),
                )
            except CaseError as exc:
                self.stderr.write(f"could not request an override on {row.case_id}: {exc}")
