"""Stored codes: each enum member is its stored string with its words; a value no member
names is read as the plain string it is, so one odd item never breaks a page."""

from __future__ import annotations

import json
from decimal import Decimal

from reconciliation.audit.models import AuditAction
from reconciliation.cases.models import Case, case_from_item, case_to_item
from reconciliation.cases.vocabulary import CaseState, CaseType


def test_a_member_is_its_stored_string_with_its_words():
    assert CaseType.AMBIGUOUS_TIMEOUT == "AMBIGUOUS_TIMEOUT"
    assert json.dumps({"a": AuditAction.CASE_OPENED}) == '{"a": "case_opened"}'
    assert CaseType.AMBIGUOUS_TIMEOUT.label == "Ambiguous timeout"
    assert "may or may not" in CaseType.AMBIGUOUS_TIMEOUT.help
    assert CaseType.words("SOMETHING_ELSE") == "SOMETHING_ELSE"


def test_an_unknown_stored_value_is_kept_as_its_string():
    case = Case(
        case_id="C-AAAAAAAAAAAAAAAA",
        case_type=CaseType.STUCK_PENDING,
        state=CaseState.OPEN,
        version=1,
        opened_at="2026-12-01T00:00:00.000000Z",
        claim_pk="acme#create_pledge#k",
        claim_version=1,
        intent_id="acme#k",
        tenant="acme",
        fund="GENERAL",
        amount=Decimal("1.00"),
        currency="USD",
        request_token="t",
        token_issued_at="2026-12-01T00:00:00.000000Z",
        audit_seq=1,
        audit_head="0" * 64,
        queue=None,
    )
    item = case_to_item(case)
    item["state"] = {"S": "ARCHIVED"}
    item["case_type"] = {"S": "LEDGER_DRIFT"}
    read = case_from_item(item)
    assert (read.state, read.case_type) == ("ARCHIVED", "LEDGER_DRIFT")
    assert not (read.is_resolved or read.is_stuck or read.awaits_approval)
    assert case_from_item(case_to_item(case)).state is CaseState.OPEN
