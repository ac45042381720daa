"""A case as a listing shows it: one row of a queue page, "My cases", the resolved list
or the overview, built from an index row (the listing attributes, never the whole case).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciliation.cases.models import CommitRetry, OverrideRequest, Resolution
from reconciliation.cases.vocabulary import CaseState, CaseType
from reconciliation.dynamo.cancellation import DecodedReason


@dataclass(frozen=True)
class CaseRow:
    case_id: str
    case_type: CaseType
    state: CaseState
    version: int
    intent_id: str
    tenant: str
    fund: str
    amount: Decimal
    currency: str
    opened_at: str
    last_actor: str
    assignee: str | None
    override: OverrideRequest | None
    reason: str = ""
    reason_detail: str = ""
    resolved_at: str = ""
    resolved_by: str = ""
    resolved_how: str = ""
    resolution: Resolution | None = None
    retry: CommitRetry | None = None  # a commit retry (queue pages poll while one runs)
    queue: str = ""  # the queue a row of "My cases" sits in

    @property
    def idempotency_key(self) -> str:
        return self.intent_id.partition("#")[2]

    @property
    def subject(self) -> str:
        """What the row is about, as its link reads: the intent, or for a fund-level
        case with none (a ledger drift) the fund and currency's ledger."""
        return self.intent_id or f"{self.fund} {self.currency} ledger"


def _reason(decoded: Sequence[DecodedReason]) -> tuple[str, str]:
    """The decoded cancellation reason in words: for the table cell, the first clause of
    each failed item's explanation ("The pledge for this intent already exists (the
    durable record)"); in full, every explanation, for the cell's hover."""
    full = [r.explanation.strip() for r in decoded if r.failed]
    short = [re.split(r"(?<=[a-z)])[:.;] ", text, maxsplit=1)[0].rstrip(".:;") for text in full]
    return "; ".join(dict.fromkeys(s for s in short if s)), " ".join(full)


def _row(item: dict[str, Any]) -> CaseRow:
    """A row from an index item as ``decoded_row`` reads it (its parts already records)."""
    return CaseRow(
        case_id=item["case_id"],
        case_type=CaseType.read(item.get("case_type", "")),
        state=CaseState.read(item.get("state", "")),
        version=int(item.get("version", 0)),
        intent_id=item.get("intent_id", ""),
        tenant=item.get("tenant", ""),
        fund=item.get("fund", ""),
        amount=Decimal(str(item.get("amount", "0"))),
        currency=item.get("currency", ""),
        opened_at=item.get("opened_at", ""),
        last_actor=item.get("last_actor", ""),
        assignee=item.get("assignee"),
        override=item.get("override"),
        resolved_at=(item.get("resolved_sort") or "").split("#", 1)[0],
        resolved_by=item.get("resolved_by", ""),
        resolved_how=item.get("resolved_how", ""),
        resolution=item.get("resolution"),
        retry=item.get("retry"),
    )
