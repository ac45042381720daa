"""The LEDGER_DRIFT case of one finding: the facts it shows, the intents it names, and
its opening. It lives in the first region; its id derives from the scope, fund,
currency and checkpoint version, so opening it twice is a no-op."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.audit.repository import GENESIS_HASH
from reconciliation.cases.models import Case, Evidence, case_id_for
from reconciliation.cases.vocabulary import CaseState, CaseType, Queue
from reconciliation.casework.drift.checkpoint import Checkpoint
from reconciliation.casework.drift.compare import ALL, Finding, PledgeSide, Totals, winner
from reconciliation.casework.drift.read import Change, Reading
from reconciliation.claims.opening import case_open
from reconciliation.stores import Store

NAMED_INTENTS = 20  # intents a case names at most (the count says how many in all)


def named_intents(scope: str, key: str, reading: Reading, side: PledgeSide) -> list[dict[str, Any]]:
    """The intents a case names: overall, the duplicates and the missing pledges of the
    fund; in a region, its changes of the fund read this run (none of them explains a
    ledger that moved without a pledge, but they are what changed)."""
    if scope != ALL:
        return [_row(c, "changed") for c in reading.changes[scope] if c.key == key]
    out = []
    for change in reading.all:
        if change.key != key or not change.is_receipt:
            continue
        pledge = side.pledges.get(change.intent_id)
        if change.intent_id in side.duplicates and (
            change.is_stray or (pledge and winner(pledge) != change.region)
        ):
            why = "duplicate"  # the receipt the pledges table did not keep, or a stray
        elif change.intent_id in side.missing:
            why = "missing"
        else:
            continue
        out.append(_row(change, why))
    return out


def _row(change: Change, why: str) -> dict[str, Any]:
    return {
        "intent_id": change.intent_id,
        # Where it was recorded: a stray's region is where it landed, not what it names.
        "region": change.landed if change.landed is not None else change.region,
        "stream": change.stream,
        "amount": str(change.amount),
        "at": change.at,
        "why": why,
    }


@dataclass(frozen=True)
class RunFacts:
    """What a run found, as every case it opens reads it."""

    ckpt: Checkpoint  # the checkpoint the run started from
    reading: Reading
    side: PledgeSide
    totals: Totals
    by_tag: dict[str, Store]


def finding_facts(finding: Finding, run: RunFacts) -> dict[str, Any]:
    """The case's evidence: the fund, the regions compared, both totals, the difference,
    what earlier cases reported, the window and the intents named."""
    scope, key = finding.scope, finding.key
    fund, _, currency = key.partition("#")
    by_tag, ledgers, totals = run.by_tag, run.reading.ledgers, run.totals
    named = named_intents(scope, key, run.reading, run.side)
    for row in named:  # by name: a stored map may not hold the first region's "" key
        row["region_name"] = by_tag[row["region"]].region_name
    ledger_total = sum((ledgers[t][key] for t in by_tag if scope in (ALL, t)), Decimal(0))
    return {
        "scope": scope,
        "regions": sorted(by_tag[t].region_name for t in by_tag if scope in (ALL, t)),
        "fund": fund,
        "currency": currency,
        "ledger_total": str(ledger_total + (totals.strays[key] if scope == ALL else 0)),
        "pledges_total": str(totals.pledges[key] if scope == ALL else totals.expected[scope][key]),
        "already_reported": str(run.ckpt.accepted_for(scope, key) + run.ckpt.pending(scope, key)),
        "difference": str(finding.difference),
        "since": run.reading.window.after,
        "until": run.reading.window.until,
        "intents": named[:NAMED_INTENTS],
        "intent_count": len(named),
    }


def drift_case_open(store: Store, finding: Finding, facts: dict[str, Any], seen: int) -> str:
    """Open the LEDGER_DRIFT case of one finding (a no-op when it exists: its id derives
    from the scope, the fund and currency, and the checkpoint version it was found at)."""
    scope, key = finding.scope, finding.key
    fund, _, currency = key.partition("#")
    now = clock.iso(clock.now())
    case_id = case_id_for(f"DRIFT#{scope}#{key}", seen, CaseType.LEDGER_DRIFT)
    case = Case(
        case_id=case_id,
        case_type=CaseType.LEDGER_DRIFT,
        state=CaseState.OPEN,
        version=1,
        opened_at=now,
        claim_pk="",
        claim_version=0,
        intent_id="",
        tenant="",
        fund=fund,
        amount=abs(finding.difference),
        currency=currency,
        request_token="",
        token_issued_at="",
        audit_seq=0,
        audit_head=GENESIS_HASH,
        queue=Queue.LEDGER_DRIFT,
        queue_sort=f"{now}#{case_id}",
        evidence=Evidence(drift=facts),
        last_action_at=now,
        in_totals=True,
    )
    stored, _ = case_open(store, case=case, actor=system_actor())
    return stored.case_id
