"""Case, pledge and claim records built in memory for the unit layer, as their writers
build them, with nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from reconciliation.actors import Actor, Role
from reconciliation.cases.models import Case, CaseRequest
from reconciliation.cases.repository import case_indexed
from reconciliation.cases.transitions import Grounds
from reconciliation.cases.vocabulary import CaseState, CaseType, ReasonCode
from reconciliation.claims.models import Pledge, PledgeStatus

OPENED_AT = "2026-11-30T08:00:00.000000Z"
REQUEST = {"donor_ref": "D-1", "fund": "general", "amount": "25.00", "currency": "USD"}


def actor(username: str = "ada", role: Role = Role.FINANCE_STAFF) -> Actor:
    return Actor(username=username, role=role, email=f"{username}@example.org")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def grounds(
    who: Actor | None = None,
    when: str = "2026-12-01T10:00:00",
    *,
    action_id: str | None = "form-1",
    reason: bool = True,
) -> Grounds:
    return Grounds(
        actor=who or actor(),
        at=at(when),
        action_id=action_id,
        reason_code=ReasonCode.EVIDENCE_CONFIRMS if reason else None,
        reason_text="A consistent read shows it." if reason else None,
    )


def a_case(
    case_type: CaseType = CaseType.STUCK_PENDING,
    state: CaseState = CaseState.OPEN,
    **fields: Any,
) -> Case:
    """An open case as ``case_build`` makes one: version 1, its queue derived."""
    case = Case(
        case_id="C-AAAAAAAAAAAAAAAA",
        case_type=case_type,
        state=state,
        version=1,
        opened_at=OPENED_AT,
        claim_pk="acme#42",
        claim_version=1,
        intent_id="acme#42",
        tenant="acme",
        fund="general",
        amount=Decimal("25.00"),
        currency="USD",
        request_token="tok-1",
        token_issued_at=OPENED_AT,
        audit_seq=1,
        audit_head="h1",
        last_action_at=OPENED_AT,
        request=CaseRequest.from_json(REQUEST),
        in_totals=True,
    )
    return case_indexed(Case(**{**case.__dict__, **fields}))


def a_pledge(**fields: Any) -> Pledge:
    values: dict[str, Any] = {
        "intent_id": "acme#42",
        "tenant": "acme",
        "donor_ref": "D-1",
        "fund": "general",
        "amount": Decimal("25.00"),
        "currency": "USD",
        "status": PledgeStatus.RECORDED,
        "request_token": "tok-1",
        "created_at": OPENED_AT,
        "ledger_key": "general#USD#0",
    }
    values.update(fields)
    return Pledge(**values)
