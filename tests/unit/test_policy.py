"""Who may do what to a case, which actions fit which case, what the evidence rules out
and what a reason must hold (reconciliation/cases/policy.py, cases/actions.py)."""

from __future__ import annotations

import pytest

from reconciliation.actors import Role
from reconciliation.cases.actions import check_reason, check_role
from reconciliation.cases.changes import InvalidReason, NotAllowed
from reconciliation.cases.policy import (
    ACTIONS,
    CASE_ACTIONS,
    EVIDENCE_NEEDED,
    MIN_REASON_LENGTH,
    EvidenceFacts,
    EvidenceNeed,
    Permission,
    allowed_actions,
    bulk_actions,
    evidence_refusal,
    may,
    offered_actions,
    visible_length,
    withheld_actions,
)
from reconciliation.cases.vocabulary import (
    CaseState,
    CaseType,
    Disposition,
    Override,
    ReasonCode,
    case_action,
)
from tests.unit.records import actor

STUCK, DRIFT = CaseType.STUCK_PENDING, CaseType.LEDGER_DRIFT
OPEN, ESCALATED = CaseState.OPEN, CaseState.ESCALATED
NO_PLEDGE = EvidenceFacts(claim_exists=True)
RECORDED = EvidenceFacts(pledge_exists=True, pledge_recorded=True, pledge_same_payload=True)
OTHER_PAYLOAD = EvidenceFacts(pledge_exists=True, pledge_recorded=True)
VOIDED = EvidenceFacts(pledge_exists=True, pledge_same_payload=True)


def test_every_permission_names_its_roles():
    """Auditors may do nothing to a case; only supervisors decide overrides; only the
    system expires them; the API only opens cases."""
    assert set(ACTIONS) == set(Permission)
    assert not any(may(Role.AUDITOR, p) for p in Permission)
    assert [
        p for p in Permission if may(Role.SUPERVISOR, p) and not may(Role.FINANCE_STAFF, p)
    ] == [
        Permission.OVERRIDE_APPROVE,
        Permission.OVERRIDE_REJECT,
    ]
    assert [p for p in Permission if may(Role.SYSTEM, p)] == [
        Permission.DISPOSE,
        Permission.OVERRIDE_EXPIRE,
        Permission.RETRY_RUN,
        Permission.OPEN,
    ]
    assert [p for p in Permission if may(Role.API, p)] == [Permission.OPEN]
    assert not may(None, Permission.NOTE)


def test_a_refused_role_is_told_in_words():
    """check_role names the role and the permission, underscores read as spaces."""
    with pytest.raises(NotAllowed, match="The auditor role may not override request."):
        check_role(actor("aud", Role.AUDITOR), Permission.OVERRIDE_REQUEST)
    check_role(actor(), Permission.ASSIGN)


def test_the_actions_of_a_case_follow_its_type_and_state():
    """An open stuck case offers the did-it-commit actions; escalated, not ESCALATE
    again; resolved, only REOPEN (never on a drift case); auditors nothing."""
    staff = Role.FINANCE_STAFF
    assert allowed_actions(STUCK, OPEN, staff) == [
        Disposition.CONFIRMED_COMMITTED,
        Disposition.RETRY_COMMIT,
        Disposition.ESCALATE,
        Override.RELEASE_CLAIM,
        Override.VOID_PLEDGE,
    ]
    assert Disposition.ESCALATE not in allowed_actions(STUCK, ESCALATED, staff)
    assert allowed_actions(CaseType.TOKEN_MISMATCH, OPEN, staff)[0] == (
        Disposition.DUPLICATE_REJECTED_OK
    )
    assert allowed_actions(STUCK, CaseState.RESOLVED, staff) == [Override.REOPEN]
    assert allowed_actions(DRIFT, CaseState.RESOLVED, staff) == []
    assert allowed_actions(STUCK, CaseState.OVERRIDE_REQUESTED, Role.SUPERVISOR) == []
    assert allowed_actions(STUCK, OPEN, Role.AUDITOR) == []


def test_the_bulk_menu_offers_what_some_listed_case_allows():
    """Bulk dispositions come in their fixed order, only those some case allows now."""
    staff = Role.FINANCE_STAFF
    assert bulk_actions([(DRIFT, OPEN)], staff) == [Disposition.ESCALATE]
    assert bulk_actions([(DRIFT, ESCALATED)], staff) == []
    assert bulk_actions([(CaseType.CANCELLED_TRANSACTION, ESCALATED), (STUCK, OPEN)], staff) == [
        Disposition.RETRY_COMMIT,
        Disposition.DUPLICATE_REJECTED_OK,
        Disposition.ESCALATE,
    ]


def test_every_action_has_an_evidence_rule():
    """The one table names a need for every disposition and override."""
    assert set(EVIDENCE_NEEDED) == set(CASE_ACTIONS)
    assert EVIDENCE_NEEDED[Override.VOID_PLEDGE] == EvidenceNeed.A_RECORDED_PLEDGE


@pytest.mark.parametrize(
    ("action", "facts", "refused"),
    [
        (Disposition.CONFIRMED_COMMITTED, NO_PLEDGE, "cannot be confirmed"),
        (Disposition.CONFIRMED_COMMITTED, VOIDED, "was voided"),
        (Disposition.CONFIRMED_COMMITTED, OTHER_PAYLOAD, "different payload"),
        (Disposition.CONFIRMED_COMMITTED, RECORDED, None),
        (Disposition.RETRY_COMMIT, NO_PLEDGE, None),
        (Disposition.RETRY_COMMIT, RECORDED, None),
        (Disposition.RETRY_COMMIT, OTHER_PAYLOAD, "cannot record this request"),
        (Disposition.DUPLICATE_REJECTED_OK, NO_PLEDGE, "no proof"),
        (Disposition.DUPLICATE_REJECTED_OK, OTHER_PAYLOAD, None),
        (Override.RELEASE_CLAIM, RECORDED, "could undo it"),
        (Override.RELEASE_CLAIM, EvidenceFacts(), "no longer exists"),
        (
            Override.RELEASE_CLAIM,
            EvidenceFacts(claim_exists=True, claim_completed=True),
            "COMPLETED",
        ),
        (Override.RELEASE_CLAIM, NO_PLEDGE, None),
        (Override.VOID_PLEDGE, VOIDED, "no recorded pledge"),
        (Override.VOID_PLEDGE, OTHER_PAYLOAD, None),
        (Disposition.ESCALATE, EvidenceFacts(), None),
    ],
)
def test_the_evidence_rules_out_what_it_contradicts(action, facts, refused):
    """Each rule refuses exactly the facts that contradict its action, in words."""
    why = evidence_refusal(action, facts)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why


def test_the_page_offers_what_the_evidence_lets_through():
    """Without a pledge a stuck case offers no confirmation and shows it withheld; while
    a retry runs, neither a second retry nor an override; unread evidence withholds
    nothing."""
    staff = Role.FINANCE_STAFF
    assert offered_actions(STUCK, OPEN, staff, NO_PLEDGE) == [
        Disposition.RETRY_COMMIT,
        Disposition.ESCALATE,
        Override.RELEASE_CLAIM,
    ]
    assert list(withheld_actions(STUCK, OPEN, staff, NO_PLEDGE)) == [
        Disposition.CONFIRMED_COMMITTED,
        Override.VOID_PLEDGE,
    ]
    assert offered_actions(STUCK, OPEN, staff, NO_PLEDGE, retry_running=True) == [
        Disposition.ESCALATE
    ]
    assert offered_actions(STUCK, OPEN, staff, None) == allowed_actions(STUCK, OPEN, staff)
    assert withheld_actions(STUCK, OPEN, staff, None) == {}


def test_a_reason_is_measured_by_what_a_reader_sees():
    """Zero-width characters, bidi controls and blanks do not count toward a reason."""
    assert visible_length("\u200b" * 20 + "\u202e" + "   ") == 0
    assert visible_length("e\u0301te") == 3  # the accent counts with its letter
    with pytest.raises(InvalidReason, match="at least"):
        check_reason(ReasonCode.OTHER, "\u200b" * 30 + "short")
    with pytest.raises(InvalidReason, match="reason code"):
        check_reason("NOT_A_CODE", "x" * MIN_REASON_LENGTH)
    with pytest.raises(InvalidReason, match="reason code"):
        check_reason(None, "x" * MIN_REASON_LENGTH)


def test_a_checked_reason_is_its_code_and_stripped_text():
    """The form's code string becomes the enum member; the text loses its margins."""
    reason = check_reason(" DONOR_REQUEST ", "  The donor asked for it.  ")
    assert reason.code is ReasonCode.DONOR_REQUEST
    assert reason.text == "The donor asked for it."


def test_a_case_action_is_read_from_its_code():
    """A form's code names a disposition or an override; anything else is refused."""
    assert case_action("RETRY_COMMIT") is Disposition.RETRY_COMMIT
    assert case_action("REOPEN") is Override.REOPEN
    with pytest.raises(ValueError):
        case_action("DROP_TABLE")
