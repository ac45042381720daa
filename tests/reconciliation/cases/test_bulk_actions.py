"""What a list's bulk menu may offer (``policy.bulk_actions``): only the bulk
dispositions some listed case allows the person now; pure, no store."""

from __future__ import annotations

from reconciliation.actors import Role
from reconciliation.cases.policy import bulk_actions
from reconciliation.cases.vocabulary import CaseState, CaseType, Disposition

STUCK_OPEN = (CaseType.STUCK_PENDING, CaseState.OPEN)
CANCELLED_OPEN = (CaseType.CANCELLED_TRANSACTION, CaseState.OPEN)
STUCK_ESCALATED = (CaseType.STUCK_PENDING, CaseState.ESCALATED)
DRIFT_ESCALATED = (CaseType.LEDGER_DRIFT, CaseState.ESCALATED)


def test_stuck_cases_are_not_offered_duplicate_rejected_ok():
    """A queue of stuck cases offers retry and escalate, never "duplicate rejected"."""
    assert bulk_actions([STUCK_OPEN, STUCK_OPEN], Role.FINANCE_STAFF) == [
        Disposition.RETRY_COMMIT,
        Disposition.ESCALATE,
    ]


def test_a_mixed_list_offers_what_any_case_allows():
    """One cancelled case among stuck ones brings "duplicate rejected" in."""
    assert bulk_actions([STUCK_OPEN, CANCELLED_OPEN], Role.FINANCE_STAFF) == [
        Disposition.RETRY_COMMIT,
        Disposition.DUPLICATE_REJECTED_OK,
        Disposition.ESCALATE,
    ]


def test_escalated_cases_are_not_offered_escalate():
    """Escalated cases are not escalated again; a drift case allows no bulk action."""
    assert bulk_actions([STUCK_ESCALATED], Role.SUPERVISOR) == [Disposition.RETRY_COMMIT]
    assert bulk_actions([DRIFT_ESCALATED], Role.SUPERVISOR) == []


def test_nothing_for_an_empty_list_or_a_role_that_acts_on_nothing():
    """No cases, or an auditor: nothing is offered."""
    assert bulk_actions([], Role.FINANCE_STAFF) == []
    assert bulk_actions([STUCK_OPEN], Role.AUDITOR) == []
