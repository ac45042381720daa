"""The write budget ``manage.py simulate`` prints (docs/capacity.md): the seed's rule and
the rule measured from the run, side by side, for the ``--peak-rps`` given.

The seed's rule: ``required_WCU = peak_rps × (1 + duplicate_ratio)`` times what one
pledge's items cost, transactions at 2× (1 + 4 × 2 = 9 units for items under 1 KB). It
leaves out index writes and the cases faults open; it charges a duplicate as a whole
pledge, where DynamoDB bills a failed conditional write of the claim (1 unit).

The measured rule counts what the run consumed per intent (one donor's pledge, with
every duplicate, retry and fault that came with it): base-table and index units as
DynamoDB reported them, plus the failed conditional writes DynamoDB bills but reports
no capacity for (:mod:`reconciliation.dynamo.failed_writes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciliation.dynamo.capacity import Capacity


@dataclass(frozen=True)
class Budget:
    peak_rps: float
    duplicate_ratio: float
    intents: int
    spent: Capacity
    pledge_base: float  # base-table units of one committed pledge (engine-reported)

    def per_intent(self, units: float) -> float:
        return units / max(1, self.intents)

    @property
    def base(self) -> float:
        return self.per_intent(self.spent.base_write)

    @property
    def index(self) -> float:
        return self.per_intent(self.spent.index_write)

    @property
    def failed(self) -> float:
        return self.per_intent(self.spent.failed_write)

    @property
    def seed_wcu(self) -> float:
        return self.peak_rps * (1 + self.duplicate_ratio) * self.pledge_base

    @property
    def measured_wcu(self) -> float:
        return self.peak_rps * (self.base + self.index + self.failed)

    def lines(self) -> list[str]:
        peak = self.peak_rps
        out = [
            f"budget for --peak-rps {peak:g} new pledges/s (this run's duplicate ratio "
            f"{self.duplicate_ratio:.2f}, {self.intents} intents):"
        ]
        if not self.spent.write or not self.pledge_base:
            # moto reports no consumed capacity; a run that committed nothing has no
            # pledge to measure: there is nothing to measure either rule from.
            out.append(
                "  seed rule (required_WCU) and measured rule: no committed pledge with "
                "reported consumed capacity; run against DynamoDB Local or DynamoDB"
            )
            return out
        out += [
            f"  seed rule: required_WCU = peak_rps × (1 + duplicate_ratio) × base units of a "
            f"pledge (its items, transactions at 2×) = {peak:g} × "
            f"{1 + self.duplicate_ratio:.2f} × {self.pledge_base:.2f} = {self.seed_wcu:.0f} WCU",
        ]
        out += [
            "  measured rule: peak_rps × write units per intent (duplicates, retries, faults "
            "and the cases they opened included):",
            f"    base items: {peak:g} × {self.base:.2f} = {peak * self.base:.0f} WCU "
            "(engine-reported; transactions at 2×)",
            f"    index writes: {peak:g} × {self.index:.2f} = {peak * self.index:.0f} WCU "
            "(engine-reported; pending_by_expiry in and out, by_day, case indexes)",
            f"    failed conditional writes: {peak:g} × {self.failed:.2f} = "
            f"{peak * self.failed:.0f} WCU (computed: DynamoDB bills them, reports nothing)",
        ]
        for kind in sorted(self.spent.failed):
            count, units = self.spent.failed[kind], self.spent.failed_units[kind]
            out.append(
                f"      {kind}: {self.per_intent(count):.3f} per intent, {units} WCU in the run"
            )
        measured = self.measured_wcu
        short = 1 - self.seed_wcu / measured
        verdict = (
            f"the seed rule under-provisions by {short:.0%}"
            if short > 0
            else f"the seed rule over-provisions by {-short:.0%}"
        )
        out.append(f"    total: {measured:.0f} WCU at peak; {verdict}")
        return out
