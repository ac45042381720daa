"""What the reliability scenarios send, and what a person does with the cases they leave."""

from __future__ import annotations

from collections import Counter

from reconciliation.cases.actions import StaffAction
from reconciliation.cases.vocabulary import CaseState, Disposition
from reconciliation.casework.dispositions import case_dispose
from reconciliation.claims.models import intent_id_for
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM, cases, repositories

FUNDS = ("GENERAL", "BUILDING", "SCHOLARSHIP", "RELIEF")
CURRENCIES = ("USD", "EUR", "GBP")


def body_for(i: int) -> dict:
    """The request body of intent ``i``: fictional donor, spread over funds/currencies."""
    return {
        "donor_ref": f"LOAD-{i:05d}",
        "fund": FUNDS[i % len(FUNDS)],
        "amount": f"{10 + i}.{i % 100:02d}",
        "currency": CURRENCIES[i % len(CURRENCIES)],
    }


def retry_open_cases(ddb, case_type: str) -> Counter:
    """A person asks RETRY_COMMIT on every open case of ``case_type`` (the task runs
    inline, as the autouse ``celery_eager`` fixture makes it); returns how each ended."""
    outcomes: Counter = Counter()
    for row in cases(ddb):
        if row["case_type"] != case_type or row["state"] == CaseState.RESOLVED:
            continue
        result = case_dispose(
            case_id=row["case_id"],
            disposition=Disposition.RETRY_COMMIT,
            staff=StaffAction(
                actor=staff_actor(),
                reason_code="TRANSIENT_FAILURE",
                reason_text="The worker died before committing; retry it.",
                seen_version=None,
            ),
            store=AS_SYSTEM.store,
        )
        case = repositories().cases.get(row["case_id"])
        status = case.retry.status if case.retry else "none"
        outcomes[status if result.applied else "refused"] += 1
    return outcomes


def recorded(keys: list[str], tenant: str) -> list[str]:
    """The keys among ``keys`` whose durable pledge exists (consistent reads)."""
    repos = repositories()
    return [k for k in keys if repos.pledges.get(intent_id_for(tenant, k)) is not None]
