"""The LEDGER_DRIFT case of one finding of the ledger drift check
(:mod:`reconciliation.casework.drift`): the intents it names and its opening. The case lives
in the first region (a region-wide finding); its id derives from the scope, the fund and
currency, and the checkpoint version it was found at, so opening it twice is a no-op."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from reconciliation import clock
from reconciliation.actors import system_actor
from reconciliation.audit.repository import GENESIS_HASH
from reconciliation.cases.models import LEDGER_DRIFT, OPEN, Case, Queue, case_id_for
from reconciliation.casework.drift_reads import ALL, Change
from reconciliation.claims.opening import case_open

if TYPE_CHECKING:
    from reconciliation.claims.models import Pledge
    from reconciliation.stores import Store


def winner(pledge: Pledge) -> str:
    """The region tag the pledge item's ledger key names (its write is the one kept)."""
    fund_part = pledge.ledger_key.rsplit("#", 1)[0]
    return fund_part.partition("@")[2]


def named_intents(scope, key, changes, every, duplicates, missing, pledges) -> list[dict]:
    """The intents a case names: overall, the duplicates and the missing pledges of the
    fund; in a region, its changes of the fund read this run (none of them explains a
    ledger that moved without a pledge, but they are what changed)."""
    out = []
    if scope == ALL:
        for change in every:
            if change.key != key or not change.is_receipt:
                continue
            pledge = pledges.get(change.intent_id)
            if change.intent_id in duplicates and (
                change.is_stray or (pledge and winner(pledge) != change.region)
            ):
                why = "duplicate"  # the receipt the pledges table did not keep, or a stray
            elif change.intent_id in missing:
                why = "missing"
            else:
                continue
            out.append(_row(change, why))
    else:
        out = [_row(c, "changed") for c in changes[scope] if c.key == key]
    return out


def _row(change: Change, why: str) -> dict:
    return {
        "intent_id": change.intent_id,
        # Where it was recorded: a stray's region is where it landed, not what it names.
        "region": change.landed if change.landed is not None else change.region,
        "stream": change.stream,
        "amount": str(change.amount),
        "at": change.at,
        "why": why,
    }


def drift_case_open(
    store: Store, scope: str, key: str, diff: Decimal, facts: dict, seen: int
) -> str:
    """Open the LEDGER_DRIFT case of one finding (a no-op when it exists: its id derives
    from the scope, the fund and currency, and the checkpoint version it was found at)."""
    fund, _, currency = key.partition("#")
    now = clock.iso(clock.now())
    case_id = case_id_for(f"DRIFT#{scope}#{key}", seen, LEDGER_DRIFT)
    case = Case(
        case_id=case_id,
        case_type=LEDGER_DRIFT,
        state=OPEN,
        version=1,
        opened_at=now,
        claim_pk="",
        claim_version=0,
        intent_id="",
        tenant="",
        fund=fund,
        amount=abs(diff),
        currency=currency,
        request_token="",
        token_issued_at="",
        audit_seq=0,
        audit_head=GENESIS_HASH,
        queue=Queue.LEDGER_DRIFT,
        queue_sort=f"{now}#{case_id}",
        evidence={"drift": facts},
        last_action_at=now,
        in_totals=True,
    )
    stored, _ = case_open(store, case=case, actor=system_actor())
    return stored.case_id
