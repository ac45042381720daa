"""What each role may do, which dispositions fit which case, and the fixed reason codes
(docs/design.md §6). Services check these themselves; the UI only hides what they refuse."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from reconciliation.actors import Role
from reconciliation.cases.vocabulary import (
    CaseAction,
    CaseState,
    CaseType,
    Disposition,
    Override,
    ReasonCode,
)
from reconciliation.codes import Code

DISPOSITIONS = tuple(Disposition)
OVERRIDES = tuple(Override)
CASE_ACTIONS: tuple[CaseAction, ...] = (*DISPOSITIONS, *OVERRIDES)
BULK_DISPOSITIONS = (
    Disposition.RETRY_COMMIT,
    Disposition.DUPLICATE_REJECTED_OK,
    Disposition.ESCALATE,
)

# Every action's label by its code (the enums hold them).
LABELS: dict[CaseAction, str] = {code: code.label for code in (*Disposition, *Override)}

# Which evidence-based dispositions and overrides make sense for each case type. Every
# case asks "did it commit?"; a cancelled or token-mismatched one may also be a correctly
# refused duplicate.
_DID_IT_COMMIT: tuple[CaseAction, ...] = (
    Disposition.CONFIRMED_COMMITTED,
    Disposition.RETRY_COMMIT,
    Disposition.ESCALATE,
    Override.RELEASE_CLAIM,
    Override.VOID_PLEDGE,
)
BY_CASE_TYPE: dict[CaseType, tuple[CaseAction, ...]] = {
    CaseType.STUCK_PENDING: _DID_IT_COMMIT,
    CaseType.AMBIGUOUS_TIMEOUT: _DID_IT_COMMIT,
    CaseType.CANCELLED_TRANSACTION: (Disposition.DUPLICATE_REJECTED_OK, *_DID_IT_COMMIT),
    CaseType.TOKEN_MISMATCH: (Disposition.DUPLICATE_REJECTED_OK, *_DID_IT_COMMIT),
    # A fund's ledger disagrees with its pledges (casework/drift/): staff record what they
    # found, each with its mandatory reason; money is never moved from a drift case, not
    # even on approval. "Corrected" means finance made its own recorded adjustment (the
    # next check then sees the ledger move back); a supervisor may be asked to look first.
    CaseType.LEDGER_DRIFT: (
        Disposition.DRIFT_EXPLAINED,
        Disposition.DRIFT_CORRECTED,
        Disposition.ESCALATE,
    ),
    # An acknowledgement the dispatcher gave up on (reconciliation/acks/undelivered.py):
    # the pledge is recorded either way; staff send it again or close the case saying why.
    CaseType.ACK_UNDELIVERED: (
        Disposition.REDELIVER,
        Disposition.ACK_CLOSED,
        Disposition.ESCALATE,
    ),
}

REASON_CODES: dict[ReasonCode, str] = {code: code.label for code in ReasonCode}
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


class Permission(StrEnum):
    """What a role may be allowed to do to a case (``ACTIONS`` says which roles may);
    the value is the words a refusal uses, underscores read as spaces."""

    ASSIGN = "assign"
    NOTE = "note"
    DISPOSE = "dispose"
    OVERRIDE_REQUEST = "override_request"
    OVERRIDE_APPROVE = "override_approve"
    OVERRIDE_REJECT = "override_reject"
    OVERRIDE_EXPIRE = "override_expire"
    RETRY_RUN = "retry_run"
    OPEN = "open"


# Actions a role may take. Auditors read and export only; system is the sweeps.
STAFF = frozenset({Role.FINANCE_STAFF, Role.SUPERVISOR})
ACTIONS: dict[Permission, frozenset[Role]] = {
    Permission.ASSIGN: STAFF,
    # A note is a staff action like any other: auditors stay read-only.
    Permission.NOTE: STAFF,
    Permission.DISPOSE: STAFF | {Role.SYSTEM},
    Permission.OVERRIDE_REQUEST: STAFF,
    Permission.OVERRIDE_APPROVE: frozenset({Role.SUPERVISOR}),
    Permission.OVERRIDE_REJECT: frozenset({Role.SUPERVISOR}),
    Permission.OVERRIDE_EXPIRE: frozenset({Role.SYSTEM}),
    Permission.RETRY_RUN: STAFF | {Role.SYSTEM},
    Permission.OPEN: frozenset({Role.SYSTEM, Role.API}),
}

# States from which each kind of change may start.
ACTIVE_STATES = (CaseState.OPEN, CaseState.ESCALATED)
REOPENABLE_STATES = (CaseState.RESOLVED,)


def allowed_actions(case_type: CaseType, state: CaseState, role: Role | None) -> list[CaseAction]:
    """The dispositions and override requests this role may start on this case now."""
    if role not in STAFF:
        return []
    if state in ACTIVE_STATES:
        options = list(BY_CASE_TYPE.get(case_type, ()))
        if state == CaseState.ESCALATED:
            options = [o for o in options if o != Disposition.ESCALATE]
        return options
    if state in REOPENABLE_STATES and case_type != CaseType.LEDGER_DRIFT:
        # A drift case resolved as explained is the accepted difference of the drift
        # check's checkpoint; a difference found later opens a case of its own.
        return [Override.REOPEN]
    return []


def bulk_actions(
    cases: Iterable[tuple[CaseType, CaseState]], role: Role | None
) -> list[Disposition]:
    """The bulk dispositions that at least one of ``cases`` (each its case type and
    state) allows ``role`` now, in ``BULK_DISPOSITIONS``' order: a list's bulk menu never
    offers what every case listed would refuse."""
    allowed = {
        a for case_type, state in set(cases) for a in allowed_actions(case_type, state, role)
    }
    return [d for d in BULK_DISPOSITIONS if d in allowed]


@dataclass(frozen=True)
class EvidenceFacts:
    """What consistent reads found about a case's intent, in the plain terms the
    evidence rules ask (this layer knows no claim or pledge type; see
    ``casework.evidence.evidence_facts``). A rule consults only the facts its action
    depends on (``EVIDENCE_NEEDED``), so a decision reads only those."""

    pledge_exists: bool = False
    pledge_recorded: bool = False
    # The pledge records this case's own request (same donor, fund, amount, currency).
    pledge_same_payload: bool = False
    claim_exists: bool = False
    claim_completed: bool = False


class EvidenceNeed(Code):
    """What a decision needs the evidence to show, checked from a consistent read at
    decision time (docs/design.md §6). A cancellation is never proof that no donor meant to
    pledge: only a durable record shows a duplicate was refused."""

    NOTHING = "NOTHING", "Nothing", "A person's judgement; no record is changed."
    PLEDGE_WITH_THIS_PAYLOAD = (
        "PLEDGE_WITH_THIS_PAYLOAD",
        "The recorded pledge with this request's payload",
        "The intent is recorded, and it is this request that was recorded.",
    )
    NO_PLEDGE_OR_THIS_PAYLOAD = (
        "NO_PLEDGE_OR_THIS_PAYLOAD",
        "No pledge, or the recorded pledge with this payload",
        "Retrying can record this request, or finds it already recorded.",
    )
    A_DURABLE_RECORD = (
        "A_DURABLE_RECORD",
        "A pledge for this intent (the durable duplicate record)",
        "Something was recorded under the key, so refusing the second write was right.",
    )
    NO_RECORDED_PLEDGE_AND_AN_OPEN_CLAIM = (
        "NO_RECORDED_PLEDGE_AND_AN_OPEN_CLAIM",
        "No recorded pledge, and a claim that did not complete",
        "Releasing lets the client retry; it must never undo a recorded pledge.",
    )
    A_RECORDED_PLEDGE = (
        "A_RECORDED_PLEDGE",
        "A recorded pledge",
        "There is something to reverse.",
    )


# Disposition × evidence: the one table (docs/architecture.md shows it, and a test holds
# the two together). Which case types offer each action is ``BY_CASE_TYPE``.
EVIDENCE_NEEDED: dict[CaseAction, EvidenceNeed] = {
    Disposition.CONFIRMED_COMMITTED: EvidenceNeed.PLEDGE_WITH_THIS_PAYLOAD,
    Disposition.RETRY_COMMIT: EvidenceNeed.NO_PLEDGE_OR_THIS_PAYLOAD,
    Disposition.DUPLICATE_REJECTED_OK: EvidenceNeed.A_DURABLE_RECORD,
    Disposition.ESCALATE: EvidenceNeed.NOTHING,
    Disposition.DRIFT_EXPLAINED: EvidenceNeed.NOTHING,
    Disposition.DRIFT_CORRECTED: EvidenceNeed.NOTHING,
    Disposition.REDELIVER: EvidenceNeed.NOTHING,
    Disposition.ACK_CLOSED: EvidenceNeed.NOTHING,
    Override.RELEASE_CLAIM: EvidenceNeed.NO_RECORDED_PLEDGE_AND_AN_OPEN_CLAIM,
    Override.VOID_PLEDGE: EvidenceNeed.A_RECORDED_PLEDGE,
    Override.REOPEN: EvidenceNeed.NOTHING,
}
_CONSULTS_CLAIM = frozenset({EvidenceNeed.NO_RECORDED_PLEDGE_AND_AN_OPEN_CLAIM})


def evidence_need(action: CaseAction) -> EvidenceNeed:
    return EVIDENCE_NEEDED.get(action, EvidenceNeed.NOTHING)


def needs_pledge(action: CaseAction) -> bool:
    return evidence_need(action) != EvidenceNeed.NOTHING


def needs_claim(action: CaseAction) -> bool:
    return evidence_need(action) in _CONSULTS_CLAIM


_NO_PLEDGE = "A consistent read finds no pledge for this intent"
_OTHER_PAYLOAD = (
    "The pledge recorded under this key has a different payload (donor, fund, amount or "
    "currency): it is not this request"
)


def _refusal_to_confirm(facts: EvidenceFacts) -> str | None:
    if not facts.pledge_exists:
        return (
            f"{_NO_PLEDGE}, so it cannot be confirmed as committed. Retry the commit "
            "or release the claim instead."
        )
    if not facts.pledge_recorded:
        return "The pledge for this intent was voided; there is no commit to confirm."
    if not facts.pledge_same_payload:
        return f"{_OTHER_PAYLOAD}, so this request was not what committed."
    return None


def _refusal_to_retry(facts: EvidenceFacts) -> str | None:
    if not facts.pledge_exists:
        return None
    if not facts.pledge_recorded:
        return "The pledge for this intent was voided; a retry cannot record it again."
    if not facts.pledge_same_payload:
        return f"{_OTHER_PAYLOAD}; a retry cannot record this request under it."
    return None


def _refusal_without_a_record(facts: EvidenceFacts) -> str | None:
    if facts.pledge_exists:
        return None
    return (
        f"{_NO_PLEDGE}: nothing shows a duplicate was refused, and a cancellation is "
        "no proof that the donor did not mean to pledge. Retry the commit or release "
        "the claim instead."
    )


def _refusal_to_release(facts: EvidenceFacts) -> str | None:
    if facts.pledge_recorded:
        return "A pledge is recorded for this intent: releasing the claim could undo it."
    if not facts.claim_exists:
        return "The claim no longer exists (TTL): there is nothing to release."
    if facts.claim_completed:
        return "The claim is COMPLETED: the pledge committed; nothing to release."
    return None


def _refusal_to_void(facts: EvidenceFacts) -> str | None:
    if facts.pledge_recorded:
        return None
    return "There is no recorded pledge for this intent to void."


# Each need's reading of the evidence; NOTHING needs none.
_REFUSALS: dict[EvidenceNeed, Callable[[EvidenceFacts], str | None]] = {
    EvidenceNeed.PLEDGE_WITH_THIS_PAYLOAD: _refusal_to_confirm,
    EvidenceNeed.NO_PLEDGE_OR_THIS_PAYLOAD: _refusal_to_retry,
    EvidenceNeed.A_DURABLE_RECORD: _refusal_without_a_record,
    EvidenceNeed.NO_RECORDED_PLEDGE_AND_AN_OPEN_CLAIM: _refusal_to_release,
    EvidenceNeed.A_RECORDED_PLEDGE: _refusal_to_void,
}


def evidence_refusal(action: CaseAction, facts: EvidenceFacts) -> str | None:
    """Why ``action`` is ruled out by what the evidence says, or ``None``: the one
    statement of ``EVIDENCE_NEEDED``. The services raise it, the case page shows it
    beside the option it disables, the bulk preview per case."""
    refusal = _REFUSALS.get(evidence_need(action))
    return refusal(facts) if refusal else None


def evidence_line(facts: EvidenceFacts) -> str:
    """The pledge evidence in one line (bulk preview rows, decisions' audit detail)."""
    if not facts.pledge_exists:
        return "No pledge is recorded for this intent."
    if not facts.pledge_recorded:
        return "The pledge for this intent was voided."
    if facts.pledge_same_payload:
        return "The pledge is recorded with this request's payload."
    return "A pledge with a different payload is recorded under this key."


def offered_actions(
    case_type: CaseType,
    state: CaseState,
    role: Role | None,
    facts: EvidenceFacts | None,
    *,
    retry_running: bool = False,
) -> list[CaseAction]:
    """What the case page offers: what ``role`` may start on the case now, less what the
    evidence rules out, and while a commit retry runs neither a second retry nor an
    override (its outcome decides whether there is anything to release or void).
    ``facts`` is ``None`` when the evidence could not be read: then everything the role
    may start is offered, and the service checks again."""
    allowed = allowed_actions(case_type, state, role)
    if retry_running:
        allowed = [a for a in allowed if a != Disposition.RETRY_COMMIT and a not in OVERRIDES]
    if facts is None:
        return allowed
    return [a for a in allowed if evidence_refusal(a, facts) is None]


def withheld_actions(
    case_type: CaseType,
    state: CaseState,
    role: Role | None,
    facts: EvidenceFacts | None,
    *,
    retry_running: bool = False,
) -> dict[CaseAction, str]:
    """The actions the role could start on this case now that the evidence rules out,
    each with its one-line reason (the page shows them disabled, with the reason)."""
    if facts is None:
        return {}
    allowed = allowed_actions(case_type, state, role)
    if retry_running:
        allowed = [a for a in allowed if a != Disposition.RETRY_COMMIT and a not in OVERRIDES]
    refusals = {a: evidence_refusal(a, facts) for a in allowed}
    return {a: why for a, why in refusals.items() if why is not None}


def may(role: Role | None, permission: Permission) -> bool:
    return role is not None and role in ACTIONS.get(permission, frozenset())


def audit_visible_performer(role: Role | None, username: str) -> str:
    """Whose audit events this viewer may read, wherever events are shown or exported:
    finance staff only their own (the username returned); auditors, supervisors and the
    system everyone's (empty)."""
    return username if role == Role.FINANCE_STAFF else ""
