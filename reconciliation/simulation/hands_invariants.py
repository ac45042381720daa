"""What must hold at rest when many hands acted on one intent and its case (the explorer's
``--actors 2`` mode, docs/architecture.md "Many hands on one case"), beside the
single-life invariants of :mod:`reconciliation.simulation.invariants`.

Read from the items themselves and their audit streams, never from what the actors said:

a. a case is resolved at most once per opening, and its resolution is never replaced
   except after an audited reopen (counted from the case's own audit events);
b. a four-eyes decision stands: each override request is approved, rejected or expired
   at most once;
c. no open case asks a question its evidence already answers: after a re-check, no OPEN or
   ESCALATED claim case about an intent whose pledge is recorded with the case's own request; and,
   before it, no case was opened by a hand whose commit met the pledge already recorded
   (a late worker whose successor recorded the very request is a replay);
d. an intent is recorded in at most one region (over every configured region);
e. the client's last answer is truthful: success only if the pledge is there, a definite
   failure only if no commit of that request applied or may have applied;
f. every resolution agrees with the evidence at rest: a case resolved as committed (by a
   person, the re-check or a retry) has its pledge, a voided one its pledge VOIDED.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from reconciliation.audit.models import AuditAction
from reconciliation.cases.models import CaseRequest, Resolution
from reconciliation.cases.vocabulary import (
    NOT_FROM_A_CLAIM,
    CaseState,
    Disposition,
    Override,
)
from reconciliation.claims.models import PledgeStatus
from reconciliation.claims.outcomes import SUCCESS, OutcomeKind
from reconciliation.simulation.invariants import Problem

RESOLVED_ONCE = "a resolved once per opening"
DECISION_STANDS = "b a four-eyes decision stands"
ANSWERED_OPEN = "c no open case its evidence answers"
ONE_REGION = "d one region per intent"
LAST_ANSWER = "e the client's last answer is truthful"
RESOLUTION_EVIDENCE = "f a resolution agrees with its evidence"

DECISIONS = (
    AuditAction.OVERRIDE_APPROVED,
    AuditAction.OVERRIDE_REJECTED,
    AuditAction.OVERRIDE_EXPIRED,
)
# The states the re-check reads and may close (an OVERRIDE_REQUESTED case awaits a
# supervisor, whose approval reads the evidence again).
RECHECKED = (CaseState.OPEN, CaseState.ESCALATED)
# Dispositions that say the intent is recorded (RETRY_COMMIT only when it succeeded).
NEEDS_PLEDGE = (Disposition.CONFIRMED_COMMITTED, Disposition.DUPLICATE_REJECTED_OK)


def _is_reopen(event: Mapping[str, Any]) -> bool:
    return event.get("action") == AuditAction.OVERRIDE_APPROVED and event.get("disposition") == (
        Override.REOPEN
    )


def _state(side: object) -> str | None:
    return side.get("state") if isinstance(side, Mapping) else None


def _leaves_resolved(event: Mapping[str, Any]) -> bool:
    """A resolved case moved on by anything but a request to reopen it (which a supervisor
    then approves, rejects or lets expire back to RESOLVED)."""
    if (
        _state(event.get("before")) != CaseState.RESOLVED
        or _state(event.get("after")) == CaseState.RESOLVED
    ):
        return False
    return not (
        event.get("action") == AuditAction.OVERRIDE_REQUESTED
        and event.get("disposition") == Override.REOPEN
    )


def _resolution(side: object) -> Mapping[str, Any] | None:
    if not isinstance(side, Mapping):
        return None
    resolution = side.get("resolution")
    return resolution if isinstance(resolution, Mapping) and resolution else None


def resolution_problems(streams: Mapping[str, list[dict[str, Any]]]) -> list[Problem]:
    """Invariant a: per opening of each case (its opening, then each approved reopen), at
    most one event writes a resolution, and none writes one over another."""
    problems: list[Problem] = []
    for stream, events in sorted(streams.items()):
        if not stream.startswith("CASE#"):
            continue
        opening, written = 1, Counter[int]()
        for event in sorted(events, key=lambda e: int(e["seq"])):
            if _is_reopen(event):
                opening += 1
                continue
            if _leaves_resolved(event):
                problems.append(
                    Problem(
                        RESOLVED_ONCE,
                        f"{stream} seq {event['seq']} ({event.get('action')}): the case left "
                        f"RESOLVED for {_state(event.get('after'))} without an audited reopen",
                    )
                )
            before, after = _resolution(event.get("before")), _resolution(event.get("after"))
            if after is None or after == before:
                continue
            written[opening] += 1
            if before is not None:
                problems.append(
                    Problem(
                        RESOLVED_ONCE,
                        f"{stream} seq {event['seq']} ({event.get('action')}): replaced the "
                        f"resolution {before.get('disposition')} by {before.get('by')} with "
                        f"{after.get('disposition')} by {after.get('by')} without a reopen",
                    )
                )
        problems.extend(
            Problem(RESOLVED_ONCE, f"{stream}: resolved {n} times in opening {opening}")
            for opening, n in sorted(written.items())
            if n > 1
        )
    return problems


def decision_problems(streams: Mapping[str, list[dict[str, Any]]]) -> list[Problem]:
    """Invariant b: an override request is decided (approved, rejected, expired) once."""
    problems: list[Problem] = []
    for stream, events in sorted(streams.items()):
        decided: dict[str, list[str]] = {}
        for event in sorted(events, key=lambda e: int(e["seq"])):
            if event.get("action") not in DECISIONS:
                continue
            request = (event.get("detail") or {}).get("request") or {}
            decided.setdefault(str(request.get("request_id")), []).append(str(event["action"]))
        problems.extend(
            Problem(
                DECISION_STANDS,
                f"{stream}: request {rid} decided {len(how)} times: {', '.join(how)}",
            )
            for rid, how in decided.items()
            if len(how) > 1
        )
    return problems


def _amount(value: object) -> Decimal | None:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


def _request(case: Mapping[str, Any]) -> Mapping[str, Any] | None:
    request = case.get("request")
    return request.to_json() if isinstance(request, CaseRequest) else None


def same_request(pledge: Mapping[str, Any], request: Mapping[str, Any] | None) -> bool:
    """Whether ``pledge`` records ``request`` (a case's normalised request)."""
    if not request:
        return False
    fields = ("donor_ref", "fund", "currency")
    return all(str(pledge.get(f)) == str(request.get(f)) for f in fields) and _amount(
        pledge.get("amount")
    ) == _amount(request.get("amount"))


def answered_problems(
    cases: Iterable[Mapping[str, Any]], pledges: Iterable[Mapping[str, Any]]
) -> list[Problem]:
    """Invariant c (after a re-check): no open claim case whose intent is recorded with
    the case's own request. ``cases`` are rows as ``decoded_row`` reads them."""
    recorded = {p["intent_id"]: p for p in pledges if p.get("status") == PledgeStatus.RECORDED}
    return [
        Problem(
            ANSWERED_OPEN,
            f"case {case['case_id']} ({case.get('case_type')}) is {case.get('state')}, yet its "
            "pledge is recorded with its request",
        )
        for case in cases
        if case.get("state") in RECHECKED
        and case.get("case_type") not in NOT_FROM_A_CLAIM
        and case.get("intent_id") in recorded
        and same_request(recorded[case["intent_id"]], _request(case))
    ]


def late_case_problems(opened_after_recorded: Iterable[tuple[str, str]]) -> list[Problem]:
    """Invariant c (before the re-check): ``(case_id, case_type)`` of cases opened, about an
    intent, after its pledge was recorded with that very request."""
    return [
        Problem(
            ANSWERED_OPEN,
            f"case {case_id} ({case_type}) was opened after the pledge was recorded with its "
            "request",
        )
        for case_id, case_type in opened_after_recorded
    ]


def region_problems(recorded_by_region: Mapping[str, Iterable[str]]) -> list[Problem]:
    """Invariant d: no intent is recorded in two regions (``regions()``' names to the
    intent ids each region's pledges table holds)."""
    where: dict[str, list[str]] = {}
    for region, intents in recorded_by_region.items():
        for intent in set(intents):
            where.setdefault(intent, []).append(region)
    return [
        Problem(ONE_REGION, f"{intent} is recorded in {len(found)} regions: {', '.join(found)}")
        for intent, found in sorted(where.items())
        if len(found) > 1
    ]


@dataclass
class ClientAnswer:
    """What one client-facing actor (a worker answering the client, the client's retry)
    answered, and what the wire knows of its own commits."""

    actor: str
    kind: OutcomeKind | None  # None: no answer (the process died)
    commit_applied: bool = False
    commit_maybe: bool = False

    @property
    def definite_failure(self) -> bool:
        return self.kind is not None and self.kind not in (*SUCCESS, OutcomeKind.OUTCOME_UNKNOWN)


def last_answer_problems(answers: list[ClientAnswer], pledge_exists: bool) -> list[Problem]:
    """Invariant e: the last answer the client heard is true at rest."""
    heard = [a for a in answers if a.kind is not None]
    if not heard:
        return []
    last = heard[-1]
    said = f"{last.actor} answered {last.kind}"
    if last.kind in SUCCESS and not pledge_exists:
        return [Problem(LAST_ANSWER, f"{said}, yet no pledge is recorded")]
    if last.definite_failure and (last.commit_applied or last.commit_maybe):
        how = "was applied" if last.commit_applied else "may have applied"
        return [Problem(LAST_ANSWER, f"{said} (a definite failure), yet its commit {how}")]
    return []


def resolution_evidence_problems(
    cases: Iterable[Mapping[str, Any]], pledges: Iterable[Mapping[str, Any]]
) -> list[Problem]:
    """Invariant f: a resolution that says the intent is recorded has its pledge; one that
    voided it, its pledge VOIDED. ``cases`` are rows as ``decoded_row`` reads them."""
    by_intent = {p["intent_id"]: p for p in pledges}
    problems: list[Problem] = []
    for case in cases:
        resolution = case.get("resolution") if case.get("state") == CaseState.RESOLVED else None
        if not isinstance(resolution, Resolution):
            continue
        how = resolution.disposition
        pledge = by_intent.get(case.get("intent_id", ""))
        recorded_said = how in NEEDS_PLEDGE or (
            how == Disposition.RETRY_COMMIT and not resolution.superseded_by
        )
        if recorded_said and pledge is None:
            problems.append(
                Problem(
                    RESOLUTION_EVIDENCE,
                    f"case {case['case_id']} resolved {how}, yet no pledge exists",
                )
            )
        if how == Override.VOID_PLEDGE and (
            pledge is None or pledge.get("status") == PledgeStatus.RECORDED
        ):
            problems.append(
                Problem(
                    RESOLUTION_EVIDENCE,
                    f"case {case['case_id']} resolved {how}, yet the pledge is not VOIDED",
                )
            )
    return problems
