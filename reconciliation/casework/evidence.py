"""The evidence refusals' facts (``policy.EvidenceFacts``) from the claim and pledge a
consistent read returned: one translation, used by the services that refuse and by the
case page that offers."""

from __future__ import annotations

from reconciliation.cases.policy import EvidenceFacts
from reconciliation.claims.models import COMPLETED, RECORDED, Claim, Pledge


def evidence_facts(*, pledge: Pledge | None = None, claim: Claim | None = None) -> EvidenceFacts:
    return EvidenceFacts(
        pledge_exists=pledge is not None,
        pledge_recorded=pledge is not None and pledge.status == RECORDED,
        claim_exists=claim is not None,
        claim_completed=claim is not None and claim.status == COMPLETED,
    )
