"""What an audit event changed, in words, for the audit page's rows: "Role: Finance staff
→ Supervisor", "Limit of GENERAL: 5,000.00 USD → 10,000.00 USD", "Pledge: 1,423.50 USD to
GENERAL".

Derived only from what the stored event already holds (``before``, ``after`` and
``detail``, reconciliation/audit/models.py · ``AuditEvent``): events are hash chained, so
nothing stored is rewritten for this. A value this module does not know is shown as
given; an event whose shape it does not know shows no change line rather than an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from reconciliation.actors import Role
from reconciliation.audit.models import AuditAction
from reconciliation.cases.vocabulary import CaseState, Queue
from reconciliation.claims.models import PledgeStatus

NOTHING = "—"  # a value that was not there (before a creation, after a removal)


@dataclass(frozen=True)
class Change:
    """One line: ``label``, and the value ``before`` → ``after`` (either may be
    ``NOTHING``); ``after`` alone when the event states a value rather than a change."""

    label: str
    before: str | None
    after: str

    @property
    def line(self) -> str:
        if self.before is None:
            return f"{self.label}: {self.after}"
        return f"{self.label}: {self.before} → {self.after}"


def _text(value: Any) -> str:
    if value is None or value == "":
        return NOTHING
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _money(amount: Any, currency: Any) -> str:
    try:
        number = Decimal(str(amount))
    except (InvalidOperation, TypeError, ValueError):
        return f"{_text(amount)} {currency or ''}".strip()
    return f"{number:,.2f} {currency or ''}".strip()


def _limit(fund: Mapping[str, Any] | None) -> str:
    if not fund:
        return NOTHING
    if fund.get("max_amount") in (None, ""):
        return f"no limit ({fund.get('currency', '')})".replace(" ()", "")
    return _money(fund["max_amount"], fund.get("currency"))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _compared(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    fields: tuple[tuple[str, str, Callable[[Any], str]], ...],
) -> list[Change]:
    """A line for each of ``fields`` (key, label, words) whose value differs."""
    out = []
    for key, label, words in fields:
        if key in before or key in after:
            old, new = before.get(key), after.get(key)
            if old != new:
                out.append(Change(label, words(old) if key in before else NOTHING, words(new)))
    return out


def _role(value: Any) -> str:
    return Role.words(value) if value else NOTHING


def _state(value: Any) -> str:
    return CaseState.words(value) if value else NOTHING


def _queue(value: Any) -> str:
    return Queue.words(value) if value else NOTHING


def _status(value: Any) -> str:
    return PledgeStatus.words(value) if value else NOTHING


STAFF_FIELDS = (
    ("role", "Role", _role),
    ("active", "Active", _text),
    ("superuser", "Superuser", _text),
    ("email", "E-mail", _text),
)
CASE_FIELDS = (
    ("state", "State", _state),
    ("queue", "Queue", _queue),
    ("assignee", "Assigned to", _text),
)
LIMIT_FIELDS = (
    ("rate_per_s", "Requests per second", lambda v: _text(v) if v else "the default"),
    ("burst", "Burst", lambda v: _text(v) if v else "the default"),
)


WEBHOOK_LIMIT_FIELDS = (
    ("max_in_flight", "Requests at once", _text),
    ("rate_per_s", "Deliveries per second", lambda v: _text(v) if v else "no limit"),
)


def _pledge(values: Mapping[str, Any]) -> Change | None:
    if "amount" not in values:
        return None
    to = f" to {values['fund']}" if values.get("fund") else ""
    return Change("Pledge", None, f"{_money(values['amount'], values.get('currency'))}{to}")


def _funds(funds: Any) -> str:
    listed = [f"{f.get('fund', '?')} ({_limit(f)})" for f in funds or [] if isinstance(f, dict)]
    return ", ".join(listed) or NOTHING


def event_changes(event: Mapping[str, Any]) -> list[Change]:
    """What ``event`` (as stored) changed, one :class:`Change` per value, in words."""
    action = event.get("action")
    before, after, detail = (_dict(event.get(k)) for k in ("before", "after", "detail"))
    if action in (
        AuditAction.STAFF_CREATED,
        AuditAction.STAFF_ROLE_CHANGED,
        AuditAction.STAFF_CHANGED,
    ):
        return _compared(before, after, STAFF_FIELDS)
    if action == AuditAction.TENANT_CREATED:
        return [Change("Funds", None, _funds(after.get("funds")))]
    if action in (AuditAction.FUND_REGISTERED, AuditAction.FUND_LIMIT_CHANGED):
        fund = after.get("fund") or before.get("fund") or "?"
        return [Change(f"Limit of {fund}", _limit(before) if before else NOTHING, _limit(after))]
    if action == AuditAction.FUND_REMOVED:
        return [Change(f"Fund {before.get('fund', '?')}", _limit(before), "removed")]
    if action == AuditAction.INTAKE_LIMIT_CHANGED:
        return _compared(before, after, LIMIT_FIELDS)
    if action == AuditAction.WEBHOOK_SECRET_ROTATED:
        # Last characters only: the trail never holds a secret.
        return [
            Change(
                f"Signing secret of {_text(after.get('url'))}",
                _text(before.get("secret")),
                _text(after.get("secret")),
            )
        ]
    if action == AuditAction.WEBHOOK_LIMITS_SET:
        return _compared(before, after, WEBHOOK_LIMIT_FIELDS)
    if action == AuditAction.PLEDGE_RECORDED:
        recorded = _pledge(after)
        return [recorded] if recorded else []
    if action == AuditAction.PLEDGE_VOIDED:
        out = _compared(before, after, (("status", "Status", _status),))
        voided = _pledge(detail)  # voids recorded since the amount was kept with them
        return [*out, voided] if voided else out
    if event.get("case_id") and (before or after):
        return _compared(before, after, CASE_FIELDS)
    return []
