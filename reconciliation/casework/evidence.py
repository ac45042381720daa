"""The evidence a case decision needs (``policy.EVIDENCE_NEEDED``), read and judged in one
place: the facts (``policy.EvidenceFacts``) from the claim and pledge a consistent read
returned, and the check every decision makes at decision time — a person's disposition,
each bulk item, an override request and its approval, a system actor's auto-resolution —
so what the case page offers and what the services accept never differ."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from reconciliation import clock
from reconciliation.cases.actions import ActionResult
from reconciliation.cases.changes import CaseError
from reconciliation.cases.models import Case
from reconciliation.cases.policy import (
    EvidenceFacts,
    evidence_line,
    evidence_refusal,
    needs_claim,
    needs_pledge,
)
from reconciliation.cases.vocabulary import CaseAction
from reconciliation.claims.models import Claim, ClaimStatus, Pledge, PledgeStatus
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.claims.request import PledgeRequest
from reconciliation.stores import Store


class EvidenceRefused(CaseError):
    """The evidence read at decision time rules the action out; nothing was written."""

    code = "evidence_refused"


def pledge_matches_case(pledge: Pledge, case: Case) -> bool:
    """Whether ``pledge`` records this case's own request (amounts compare as numbers: a
    claim written when every amount had two places, "1000.00" JPY, matches "1000")."""
    if not case.request:
        return False
    try:
        asked = PledgeRequest.from_normalised(case.request.to_json())
    except (KeyError, ArithmeticError, ValueError):
        return False
    return PledgeRequest.from_normalised(pledge.normalised_request()) == asked


def evidence_facts(
    *, case: Case, pledge: Pledge | None = None, claim: Claim | None = None
) -> EvidenceFacts:
    return EvidenceFacts(
        pledge_exists=pledge is not None,
        pledge_recorded=pledge is not None and pledge.status == PledgeStatus.RECORDED,
        pledge_same_payload=pledge is not None and pledge_matches_case(pledge, case),
        claim_exists=claim is not None,
        claim_completed=claim is not None and claim.status == ClaimStatus.COMPLETED,
    )


@dataclass(frozen=True)
class DecisionEvidence:
    """What a decision read, consistently, at ``read_at``: the pledge and claim (``None``
    where absent or not read: ``pledge_read`` and ``claim_read`` say which were) and the
    facts judged from them."""

    pledge: Pledge | None
    claim: Claim | None
    facts: EvidenceFacts
    pledge_read: bool = False
    claim_read: bool = False
    read_at: str = ""

    @property
    def line(self) -> str:
        """One line a person reads beside the decision (the bulk preview, an event)."""
        return evidence_line(self.facts)

    def with_claim(self, claim: Claim) -> DecisionEvidence:
        """This evidence with the claim as the decision's own transaction wrote it (the
        facts stay those the decision was judged on)."""
        return replace(self, claim=claim, claim_read=True)


@dataclass(frozen=True)
class Decided(ActionResult):
    """An action's result with the evidence its decider read and the action's own writes
    applied: the page after it is built from these, not read again."""

    evidence: DecisionEvidence | None = None


def evidence_read(
    store: Store, case: Case, action: CaseAction, *, claim_too: bool = False
) -> DecisionEvidence:
    """Consistent reads of what ``action``'s evidence rule consults, nothing more; the
    claim also with ``claim_too`` (an action that writes it, fenced on what it read)."""
    read_at = clock.iso(clock.now())
    pledge_read = needs_pledge(action) and bool(case.intent_id)
    claim_read = claim_too or needs_claim(action)
    pledge = PledgeRepository(store).get(case.intent_id, consistent=True) if pledge_read else None
    claim = ClaimRepository(store).get(case.claim_pk, consistent=True) if claim_read else None
    return DecisionEvidence(
        pledge,
        claim,
        evidence_facts(case=case, pledge=pledge, claim=claim),
        pledge_read=pledge_read,
        claim_read=claim_read,
        read_at=read_at,
    )


def evidence_of_cases(store: Store, cases: Sequence[Case]) -> dict[str, DecisionEvidence]:
    """Each case's pledge and claim (all of ``store``'s region), by case id: one
    BatchGetItem per table per 100 cases, not two reads per case, so a list that shows
    every row's evidence (the approvals page) costs what its page costs, whatever its
    length. For display beside a decision: the decision reads again when it is made."""
    read_at = clock.iso(clock.now())
    with_intent = [c for c in cases if c.intent_id]
    pledges = PledgeRepository(store).get_many([c.intent_id for c in with_intent])
    claims = ClaimRepository(store).get_many([c.claim_pk for c in with_intent])
    out: dict[str, DecisionEvidence] = {}
    for case in cases:
        pledge = pledges.get(case.intent_id)
        claim = claims.get(case.claim_pk)
        out[case.case_id] = DecisionEvidence(
            pledge,
            claim,
            evidence_facts(case=case, pledge=pledge, claim=claim),
            pledge_read=bool(case.intent_id),
            claim_read=bool(case.intent_id),
            read_at=read_at,
        )
    return out


def evidence_check(
    store: Store, case: Case, action: CaseAction, *, claim_too: bool = False
) -> DecisionEvidence:
    """The evidence ``action`` needs on ``case``, read now (see :func:`evidence_read`);
    :class:`EvidenceRefused` with the one-line reason when it is missing."""
    evidence = evidence_read(store, case, action, claim_too=claim_too)
    refusal = evidence_refusal(action, evidence.facts)
    if refusal is not None:
        raise EvidenceRefused(refusal)
    return evidence
