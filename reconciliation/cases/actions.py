"""What every action on a case starts with (docs/design.md §6): the role and reason checks, the
case and version read, the grounds its transition is made on, and the result handed back
to the page. Shared by dispositions, overrides and retries."""

from __future__ import annotations

from dataclasses import dataclass

from reconciliation import clock
from reconciliation.actors import Actor
from reconciliation.cases.changes import InvalidReason, NotAllowed, case_load
from reconciliation.cases.models import Case
from reconciliation.cases.policy import (
    MAX_REASON_LENGTH,
    MIN_REASON_LENGTH,
    Permission,
    may,
    visible_length,
)
from reconciliation.cases.transitions import Grounds
from reconciliation.cases.vocabulary import ReasonCode
from reconciliation.stores import Store


@dataclass(frozen=True)
class StaffAction:
    """Who acts on a case and on what grounds, as the form sent it: the reason (code and
    text, checked by :func:`action_begin`), the case version the person saw (``None``:
    act on whatever is current) and the form's action id (a second submission of the
    same id changes nothing)."""

    actor: Actor
    # The form's choice; a code no member names (an old or forged form) is refused by
    # check_reason, as is none.
    reason_code: ReasonCode | str | None = None
    reason_text: str | None = None
    seen_version: int | None = None
    action_id: str | None = None

    def grounds(self, reason: Reason | None = None) -> Grounds:
        """The grounds of a change made now on this action: ``reason`` as checked (none
        for a change that records no reason, as an assignment)."""
        return Grounds(
            actor=self.actor,
            at=clock.now(),
            action_id=self.action_id,
            reason_code=reason.code if reason else None,
            reason_text=reason.text if reason else None,
        )


@dataclass(frozen=True)
class Reason:
    """A mandatory reason as checked: a known code and a text a reader can see."""

    code: ReasonCode
    text: str


@dataclass(frozen=True)
class ActionStart:
    """What :func:`action_begin` found: the case as read, whether this action id was
    already applied to it, the reason as checked, and the grounds of the change."""

    case: Case
    done: bool
    reason: Reason
    grounds: Grounds


@dataclass(frozen=True)
class ActionResult:
    case: Case
    applied: bool
    message: str


def check_role(actor: Actor, permission: Permission) -> None:
    if not may(actor.role, permission):
        raise NotAllowed(f"The {actor.role} role may not {permission.replace('_', ' ')}.")


def check_reason(reason_code: ReasonCode | str | None, reason_text: str | None) -> Reason:
    code = ReasonCode.of((reason_code or "").strip())
    text = (reason_text or "").strip()
    if code is None:
        raise InvalidReason("Choose a reason code from the list.")
    if visible_length(text) < MIN_REASON_LENGTH:
        raise InvalidReason(f"Explain the reason in at least {MIN_REASON_LENGTH} characters.")
    if len(text) > MAX_REASON_LENGTH:
        raise InvalidReason(f"Keep the reason under {MAX_REASON_LENGTH} characters.")
    return Reason(code, text)


def already_applied(case: Case) -> ActionResult:
    return ActionResult(case, False, "That action was already applied; nothing changed.")


def action_begin(
    store: Store, *, case_id: str, staff: StaffAction, permission: Permission
) -> ActionStart:
    """The checks every reasoned action starts with: role, reason, case and version."""
    check_role(staff.actor, permission)
    reason = check_reason(staff.reason_code, staff.reason_text)
    loaded = case_load(store, case_id, seen_version=staff.seen_version, action_id=staff.action_id)
    return ActionStart(loaded.case, loaded.done, reason, staff.grounds(reason))
