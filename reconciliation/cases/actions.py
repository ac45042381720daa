"""What every action on a case starts with (docs/design.md §6): the role and reason checks, the
case and version read, the resolution record and the result handed back to the page.
Shared by dispositions, overrides and retries."""

from __future__ import annotations

from dataclasses import dataclass

from reconciliation import clock
from reconciliation.actors import Actor
from reconciliation.cases.changes import InvalidReason, NotAllowed, case_load
from reconciliation.cases.models import Case, Resolution
from reconciliation.cases.policy import (
    MAX_REASON_LENGTH,
    MIN_REASON_LENGTH,
    REASON_CODES,
    may,
    visible_length,
)
from reconciliation.cases.vocabulary import Disposition, Override
from reconciliation.stores import Store


@dataclass(frozen=True)
class StaffAction:
    """Who acts on a case and on what grounds, as the form sent it: the reason (code and
    text, checked by :func:`action_begin`), the case version the person saw (``None``:
    act on whatever is current) and the form's action id (a second submission of the
    same id changes nothing)."""

    actor: Actor
    reason_code: str | None = None
    reason_text: str | None = None
    seen_version: int | None = None
    action_id: str | None = None


@dataclass(frozen=True)
class ActionStart:
    """What :func:`action_begin` found: the case as read, whether this action id was
    already applied to it, and the reason as checked (stripped)."""

    case: Case
    done: bool
    reason_code: str
    reason_text: str


@dataclass(frozen=True)
class ActionResult:
    case: Case
    applied: bool
    message: str


def check_role(actor: Actor, action: str) -> None:
    if not may(actor.role, action):
        raise NotAllowed(f"The {actor.role} role may not {action.replace('_', ' ')}.")


def check_reason(reason_code: str | None, reason_text: str | None) -> tuple[str, str]:
    code = (reason_code or "").strip()
    text = (reason_text or "").strip()
    if code not in REASON_CODES:
        raise InvalidReason("Choose a reason code from the list.")
    if visible_length(text) < MIN_REASON_LENGTH:
        raise InvalidReason(f"Explain the reason in at least {MIN_REASON_LENGTH} characters.")
    if len(text) > MAX_REASON_LENGTH:
        raise InvalidReason(f"Keep the reason under {MAX_REASON_LENGTH} characters.")
    return code, text


def resolution_for(
    disposition: str,
    actor: Actor,
    *,
    requested_by: str | None = None,
    outcome: str | None = None,
    asked_by: str | None = None,
) -> Resolution:
    return Resolution(
        disposition=Disposition.of(disposition) or Override.read(disposition),
        by=actor.username,
        at=clock.iso(clock.now()),
        requested_by=requested_by,
        outcome=outcome,
        asked_by=asked_by,
    )


def already_applied(case: Case) -> ActionResult:
    return ActionResult(case, False, "That action was already applied; nothing changed.")


def action_begin(store: Store, *, case_id: str, staff: StaffAction, permission: str) -> ActionStart:
    """The checks every reasoned action starts with: role, reason, case and version."""
    check_role(staff.actor, permission)
    code, text = check_reason(staff.reason_code, staff.reason_text)
    loaded = case_load(store, case_id, seen_version=staff.seen_version, action_id=staff.action_id)
    return ActionStart(loaded.case, loaded.done, code, text)
