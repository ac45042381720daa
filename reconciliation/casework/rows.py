"""A case as a listing shows it: one row of a queue page, "My cases", the resolved list
or the overview, built from an index row (the listing attributes, never the whole case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from reconciliation.dynamo.cancellation import CancellationCode


@dataclass(frozen=True)
class CaseRow:
    case_id: str
    case_type: str
    state: str
    version: int
    intent_id: str
    tenant: str
    fund: str
    amount: Decimal
    currency: str
    opened_at: str
    last_actor: str
    assignee: str | None
    override: dict | None
    reason: str = ""
    reason_detail: str = ""
    resolved_at: str = ""
    resolved_by: str = ""
    resolved_how: str = ""
    resolution: dict | None = None
    retry: dict | None = None  # a commit retry's record (queue pages poll while one runs)
    queue: str = ""  # the queue a row of "My cases" sits in

    @property
    def idempotency_key(self) -> str:
        return self.intent_id.partition("#")[2]

    @property
    def subject(self) -> str:
        """What the row is about, as its link reads: the intent, or for a fund-level
        case with none (a ledger drift) the fund and currency's ledger."""
        return self.intent_id or f"{self.fund} {self.currency} ledger"


def _reason(decoded: list) -> tuple[str, str]:
    """The decoded cancellation reason in words: for the table cell, the first clause of
    each failed item's explanation ("The pledge for this intent already exists (the
    durable record)"); in full, every explanation, for the cell's hover."""
    failed = [
        r
        for r in decoded or []
        if isinstance(r, dict) and r.get("code") not in (None, CancellationCode.NONE)
    ]
    full = [str(r.get("explanation", "")).strip() for r in failed]
    short = [re.split(r"(?<=[a-z)])[:.;] ", text, maxsplit=1)[0].rstrip(".:;") for text in full]
    return "; ".join(dict.fromkeys(s for s in short if s)), " ".join(full)


def _row(item: dict) -> CaseRow:
    override = item.get("override")
    resolution = item.get("resolution") if isinstance(item.get("resolution"), dict) else None
    return CaseRow(
        case_id=item["case_id"],
        case_type=item.get("case_type", ""),
        state=item.get("state", ""),
        version=int(item.get("version", 0)),
        intent_id=item.get("intent_id", ""),
        tenant=item.get("tenant", ""),
        fund=item.get("fund", ""),
        amount=Decimal(str(item.get("amount", "0"))),
        currency=item.get("currency", ""),
        opened_at=item.get("opened_at", ""),
        last_actor=item.get("last_actor", ""),
        assignee=item.get("assignee"),
        override=override,
        resolved_at=(item.get("resolved_sort") or "").split("#", 1)[0],
        resolved_by=item.get("resolved_by", ""),
        resolved_how=item.get("resolved_how", ""),
        resolution=resolution,
        retry=item.get("retry") if isinstance(item.get("retry"), dict) else None,
    )
