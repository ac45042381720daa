"""What each role may do, which dispositions fit which case, and the fixed reason codes
(DESIGN.md §6). Services check these themselves; the UI only hides what they refuse."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from reconciliation.actors import Role
from reconciliation.cases.models import (
    AMBIGUOUS_TIMEOUT,
    CANCELLED_TRANSACTION,
    ESCALATED,
    LEDGER_DRIFT,
    OPEN,
    RESOLVED,
    STUCK_PENDING,
    TOKEN_MISMATCH,
    Disposition,
    Override,
    ReasonCode,
)

CONFIRMED_COMMITTED = Disposition.CONFIRMED_COMMITTED
RETRY_COMMIT = Disposition.RETRY_COMMIT
DUPLICATE_REJECTED_OK = Disposition.DUPLICATE_REJECTED_OK
ESCALATE = Disposition.ESCALATE
DRIFT_EXPLAINED = Disposition.DRIFT_EXPLAINED
DRIFT_CORRECTED = Disposition.DRIFT_CORRECTED
RELEASE_CLAIM = Override.RELEASE_CLAIM
VOID_PLEDGE = Override.VOID_PLEDGE
REOPEN = Override.REOPEN

DISPOSITIONS = tuple(Disposition)
OVERRIDES = tuple(Override)
BULK_DISPOSITIONS = (RETRY_COMMIT, DUPLICATE_REJECTED_OK, ESCALATE)

# Every action's label by its code (the enums hold them).
LABELS: dict[str, str] = {code: code.label for code in (*Disposition, *Override)}

# Which evidence-based dispositions and overrides make sense for each case type. Every
# case asks "did it commit?"; a cancelled or token-mismatched one may also be a correctly
# refused duplicate.
_DID_IT_COMMIT = (CONFIRMED_COMMITTED, RETRY_COMMIT, ESCALATE, RELEASE_CLAIM, VOID_PLEDGE)
BY_CASE_TYPE: dict[str, tuple[str, ...]] = {
    STUCK_PENDING: _DID_IT_COMMIT,
    AMBIGUOUS_TIMEOUT: _DID_IT_COMMIT,
    CANCELLED_TRANSACTION: (DUPLICATE_REJECTED_OK, *_DID_IT_COMMIT),
    TOKEN_MISMATCH: (DUPLICATE_REJECTED_OK, *_DID_IT_COMMIT),
    # A fund's ledger disagrees with its pledges (casework/drift.py): staff record what they
    # found, each with its mandatory reason; money is never moved from a drift case, not
    # even on approval. "Corrected" means finance made its own recorded adjustment (the
    # next check then sees the ledger move back); a supervisor may be asked to look first.
    LEDGER_DRIFT: (DRIFT_EXPLAINED, DRIFT_CORRECTED, ESCALATE),
}

REASON_CODES: dict[str, str] = {code: code.label for code in ReasonCode}
MIN_REASON_LENGTH = 10
MAX_REASON_LENGTH = 2000

# What draws nothing on screen: controls, format characters (zero-width spaces and
# joiners, bidi controls, the BOM, soft hyphen), surrogates, private-use and unassigned
# code points, separators; combining marks count with the letter they sit on. Some
# letters and symbols render blank too (Hangul fillers, the blank Braille pattern).
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me"})
_BLANK_CHARACTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def visible_length(text: str) -> int:
    """How many characters of ``text`` a reader sees: a mandatory reason is measured by
    these, so ten zero-width spaces or bidi controls do not pass for an explanation."""
    return sum(
        1
        for ch in text
        if not ch.isspace()
        and ch not in _BLANK_CHARACTERS
        and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
    )


# Actions a role may take. Auditors read and export only; system is the sweeps.
STAFF = frozenset({Role.FINANCE_STAFF, Role.SUPERVISOR})
ACTIONS = {
    "assign": STAFF,
    "dispose": STAFF | {Role.SYSTEM},
    "override_request": STAFF,
    "override_approve": frozenset({Role.SUPERVISOR}),
    "override_reject": frozenset({Role.SUPERVISOR}),
    "override_expire": frozenset({Role.SYSTEM}),
    "retry_run": STAFF | {Role.SYSTEM},
    "open": frozenset({Role.SYSTEM, Role.API}),
}

# States from which each kind of change may start.
ACTIVE_STATES = (OPEN, ESCALATED)
REOPENABLE_STATES = (RESOLVED,)


def allowed_actions(case_type: str, state: str, role: Role | None) -> list[str]:
    """The dispositions and override requests this role may start on this case now."""
    if role not in STAFF:
        return []
    if state in ACTIVE_STATES:
        options = list(BY_CASE_TYPE.get(case_type, ()))
        if state == ESCALATED:
            options = [o for o in options if o != ESCALATE]
        return options
    if state in REOPENABLE_STATES and case_type != LEDGER_DRIFT:
        # A drift case resolved as explained is the accepted difference of the drift
        # check's checkpoint; a difference found later opens a case of its own.
        return [REOPEN]
    return []


@dataclass(frozen=True)
class EvidenceFacts:
    """What consistent reads found about a case's intent, in the plain terms the
    evidence refusals ask (this layer knows no claim or pledge type; see
    ``casework.evidence.evidence_facts``). A refusal consults only the facts its action
    depends on, so a service reads only those."""

    pledge_exists: bool = False
    pledge_recorded: bool = False
    claim_exists: bool = False
    claim_completed: bool = False


def evidence_refusal(action: str, facts: EvidenceFacts) -> str | None:
    """Why the services refuse ``action`` given what the evidence says, or ``None``.
    The one statement of these rules: the services raise it, the case page offers only
    the actions it lets through."""
    if action == CONFIRMED_COMMITTED and not facts.pledge_exists:
        return (
            "A consistent read finds no pledge for this intent, so it cannot be confirmed "
            "as committed. Retry the commit or release the claim instead."
        )
    if action == RELEASE_CLAIM and not facts.claim_exists:
        return "The claim no longer exists (TTL): there is nothing to release."
    if action == RELEASE_CLAIM and facts.claim_completed:
        return "The claim is COMPLETED: the pledge committed; nothing to release."
    if action == VOID_PLEDGE and not facts.pledge_recorded:
        return "There is no recorded pledge for this intent to void."
    return None


def offered_actions(
    case_type: str,
    state: str,
    role: Role | None,
    facts: EvidenceFacts | None,
    *,
    retry_running: bool = False,
) -> list[str]:
    """What the case page offers: what ``role`` may start on the case now, less what the
    evidence refusals would refuse, and less a second commit retry while one runs.
    ``facts`` is ``None`` when the evidence could not be read: then everything the role
    may start is offered, and the service checks again."""
    allowed = allowed_actions(case_type, state, role)
    if retry_running:
        allowed = [a for a in allowed if a != RETRY_COMMIT]
    if facts is None:
        return allowed
    return [a for a in allowed if evidence_refusal(a, facts) is None]


def may(role: Role | None, action: str) -> bool:
    return role is not None and role in ACTIONS.get(action, frozenset())


def audit_visible_performer(role: Role | None, username: str) -> str:
    """Whose audit events this viewer may read, wherever events are shown or exported:
    finance staff only their own (the username returned); auditors, supervisors and the
    system everyone's (empty)."""
    return username if role == Role.FINANCE_STAFF else ""
