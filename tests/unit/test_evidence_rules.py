"""The facts a decision is judged on, from the pledge and claim a read returned
(reconciliation/casework/evidence.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from reconciliation.cases.models import CaseRequest
from reconciliation.cases.policy import EvidenceFacts, evidence_line
from reconciliation.casework.evidence import evidence_facts, pledge_matches_case
from reconciliation.claims.models import PledgeStatus
from tests.unit.records import a_case, a_pledge


def test_a_pledge_matches_the_request_it_records():
    """Same donor, fund, amount and currency: the case's own request was recorded."""
    assert pledge_matches_case(a_pledge(), a_case())


@pytest.mark.parametrize(
    "change", [{"donor_ref": "D-2"}, {"fund": "roof"}, {"amount": Decimal("25.01")}]
)
def test_any_other_payload_does_not_match(change):
    """A pledge differing in donor, fund or amount is another request under the key."""
    assert not pledge_matches_case(a_pledge(**change), a_case())


def test_amounts_compare_as_numbers():
    """A claim written when every amount had two places ("1000.00" JPY) matches the
    pledge recorded as 1000 yen."""
    request = CaseRequest(donor_ref="D-1", fund="general", amount="1000.00", currency="JPY")
    case = a_case(request=request, currency="JPY")
    assert pledge_matches_case(a_pledge(amount=Decimal("1000"), currency="JPY"), case)


def test_a_case_without_a_request_matches_nothing():
    """A fund-level case (no claim, no request) never matches a pledge, nor does a
    request whose amount is not a number."""
    assert not pledge_matches_case(a_pledge(), a_case(request=CaseRequest()))
    broken = CaseRequest(donor_ref="D-1", fund="general", amount="lots", currency="USD")
    assert not pledge_matches_case(a_pledge(), a_case(request=broken))


def test_the_facts_of_a_read():
    """No pledge read: nothing exists; a voided pledge exists but is not recorded."""
    case = a_case()
    assert evidence_facts(case=case) == EvidenceFacts()
    assert evidence_facts(case=case, pledge=a_pledge()) == EvidenceFacts(
        pledge_exists=True, pledge_recorded=True, pledge_same_payload=True
    )
    voided = evidence_facts(case=case, pledge=a_pledge(status=PledgeStatus.VOIDED))
    assert (voided.pledge_exists, voided.pledge_recorded) == (True, False)
    assert evidence_line(voided) == "The pledge for this intent was voided."
    other = evidence_facts(case=case, pledge=a_pledge(fund="roof"))
    assert evidence_line(other) == "A pledge with a different payload is recorded under this key."
