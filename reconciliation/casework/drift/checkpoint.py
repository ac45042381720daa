"""What the drift check keeps from one run to the next: one item in the first region's
ledger table, written only if its version is still the one the run read (of two
concurrent runs, one advances it), and the differences its cases already report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import Disposition
from reconciliation.dynamo.items import from_item
from reconciliation.stores import Store

# The checkpoint: one item of the first region's ledger table, under a key no fund can
# have (fund codes are letters, digits and dashes).
CHECKPOINT_KEY = "#DRIFT#CHECKPOINT"


@dataclass
class Checkpoint:
    """Where the check stands: everything at or before ``watermark`` is in ``expected``
    (per region tag: each ``fund#currency``'s ledger as its receipts and voids say) and
    in ``pledges`` (per ``fund#currency``: the sum of RECORDED pledges); ``accepted`` holds
    the differences explained for good (per scope, region tag or ``ALL``), ``open`` the
    open cases and what each reports, ``reported`` the duplicate intents already counted
    whose receipts are still inside the settle window."""

    version: int = 0
    watermark: str = ""
    checked_at: str = ""
    expected: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    pledges: dict[str, Decimal] = field(default_factory=dict)
    accepted: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    open: dict[str, dict[str, Any]] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)
    # Per ``fund#currency``: what stray recordings added to ledger shards under another
    # region's names (shards no region's own total reads).
    strays: dict[str, Decimal] = field(default_factory=dict)

    def body(self) -> str:
        def plain(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return str(value) if isinstance(value, Decimal) else value

        fields = ("watermark", "checked_at", "expected", "pledges", "accepted", "open", "strays")
        return json.dumps(
            {**{n: plain(getattr(self, n)) for n in fields}, "reported": self.reported},
            sort_keys=True,
        )

    @classmethod
    def parse(cls, version: int, body: str) -> Checkpoint:
        data = json.loads(body)

        def money(d: dict[str, Any]) -> dict[str, Decimal]:
            return {k: Decimal(v) for k, v in d.items()}

        return cls(
            version=version,
            watermark=data["watermark"],
            checked_at=data.get("checked_at", ""),
            expected={r: money(d) for r, d in data.get("expected", {}).items()},
            pledges=money(data.get("pledges", {})),
            accepted={s: money(d) for s, d in data.get("accepted", {}).items()},
            open=data.get("open", {}),
            reported=data.get("reported", {}),
            strays=money(data.get("strays", {})),
        )

    def successor(self, *, watermark: str, checked_at: str) -> Checkpoint:
        """The next version, carrying what outlives a run: the accepted differences, the
        open cases, the duplicates still inside the settle window, the strays' totals.
        The totals at the new watermark are the run's to fill in."""
        return Checkpoint(
            version=self.version + 1,
            watermark=watermark,
            checked_at=checked_at,
            accepted={s: dict(d) for s, d in self.accepted.items()},
            open=dict(self.open),
            reported={i: at for i, at in self.reported.items() if at > watermark},
            strays=dict(self.strays),
        )

    def accepted_for(self, scope: str, key: str) -> Decimal:
        """The difference of ``key`` in ``scope`` explained for good."""
        return self.accepted.get(scope, {}).get(key, Decimal(0))

    def pending(self, scope: str, key: str) -> Decimal:
        """What the scope's open cases report for ``key``."""
        open_cases = self.open.values()
        found = (
            Decimal(m["difference"]) for m in open_cases if (m["scope"], m["key"]) == (scope, key)
        )
        return sum(found, Decimal(0))

    def beyond(self, scope: str, key: str, diff: Decimal) -> Decimal:
        """The part of ``diff`` (net of accepted differences) no open case reports: none
        when it equals theirs, or when it is gone (corrected before its case was
        resolved)."""
        pending = self.pending(scope, key)
        return Decimal(0) if diff in (0, pending) else diff - pending


def settle_resolved(ckpt: Checkpoint, store: Store) -> None:
    """Drop the cases resolved since the last run (one GetItem per open drift case); a
    DRIFT_EXPLAINED one leaves its difference accepted for good."""
    for case_id, meta in list(ckpt.open.items()):
        case = CaseRepository(store).get(case_id)
        if case is None or not case.is_resolved:
            continue
        if case.resolution and case.resolution.disposition == Disposition.DRIFT_EXPLAINED:
            scope = ckpt.accepted.setdefault(meta["scope"], {})
            scope[meta["key"]] = scope.get(meta["key"], Decimal(0)) + Decimal(meta["difference"])
        del ckpt.open[case_id]


class CheckpointRepository:
    """The checkpoint item, in the first region (a region-wide record)."""

    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.ledger

    def get(self) -> Checkpoint:
        response = self.client.get_item(
            TableName=self.table, Key={"fund": {"S": CHECKPOINT_KEY}}, ConsistentRead=True
        )
        item = from_item(response.get("Item"))
        if not item:
            return Checkpoint()
        return Checkpoint.parse(int(item["version"]), item["state"])

    def put(self, checkpoint: Checkpoint, *, seen: int) -> None:
        """Write ``checkpoint`` as version ``seen + 1``, only if the stored one is still
        ``seen`` (0: none yet): of two concurrent runs, one advances it. Raises the
        ConditionalCheckFailedException the loser gets."""
        condition = "attribute_not_exists(fund)" if seen == 0 else "version = :seen"
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "Item": {
                "fund": {"S": CHECKPOINT_KEY},
                "version": {"N": str(seen + 1)},
                "state": {"S": checkpoint.body()},
            },
            "ConditionExpression": condition,
        }
        if seen:
            kwargs["ExpressionAttributeValues"] = {":seen": {"N": str(seen)}}
        self.client.put_item(**kwargs)
