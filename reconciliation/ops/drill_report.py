"""The drill's report: one row per scenario or invariant, and how it is shown.

A row is ``pass``, ``FAIL``, ``unprovable`` (the engine cannot show it, e.g. moto and
``ClientRequestToken``) or ``not applicable`` (the configuration has nothing to show, e.g.
the two-region scenario with one region); the report passes when no row failed. The rows
are filled by :mod:`reconciliation.ops.drill_scenarios`; the run is :func:`drill_run`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class DrillStatus(StrEnum):
    """A row's result, as the report, the page and the stored event spell it."""

    PASS = "pass"
    FAIL = "FAIL"
    UNPROVABLE = "unprovable"
    NOT_APPLICABLE = "not applicable"


@dataclass
class DrillRow:
    scenario: str
    expected: str
    observed: str
    status: DrillStatus


@dataclass
class DrillReport:
    run_id: str
    started_at: str
    engine_honours_token: bool
    rows: list[DrillRow] = field(default_factory=list)
    # The ``Pledge-Version`` the drill's requests were sent under (the current one), as
    # its first commit's claim and pledge stored it (reconciliation/claims/versions.py).
    pledge_version: str = ""

    @property
    def passed(self) -> bool:
        return all(r.status != DrillStatus.FAIL for r in self.rows)

    @property
    def unprovable(self) -> list[str]:
        return [r.scenario for r in self.rows if r.status == DrillStatus.UNPROVABLE]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "engine_honours_token": self.engine_honours_token,
            "pledge_version": self.pledge_version,
            "passed": self.passed,
            "rows": [asdict(r) for r in self.rows],
        }

    def table(self) -> str:
        widths = [34, 46, 76, 10]
        header = ("scenario", "expected", "observed", "result")
        lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
        lines.append("-+-".join("-" * w for w in widths))
        for r in self.rows:
            cells = (r.scenario, r.expected, r.observed, r.status)
            lines.append(
                " | ".join(str(c)[:w].ljust(w) for c, w in zip(cells, widths, strict=True))
            )
        return "\n".join(lines)
