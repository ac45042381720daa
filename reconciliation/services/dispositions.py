"""Dispositions, four-eyes overrides, assignment and bulk work on cases (DESIGN.md §6).

Each service takes the acting :class:`Actor` (with its role), the case version the
actor saw and an action id from the form, checks the role itself, and commits one
transaction: the case change, its audit event and any claim/pledge/ledger write the
disposition implies. A repeated action id is a no-op; a stale version is refused with
who changed the case and when.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass

from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Actor, Role, system_actor
from reconciliation.policy import (
    BULK_DISPOSITIONS,
    CONFIRMED_COMMITTED,
    DUPLICATE_REJECTED_OK,
    ESCALATE,
    LABELS,
    MAX_REASON_LENGTH,
    MIN_REASON_LENGTH,
    OVERRIDES,
    REASON_CODES,
    RELEASE_CLAIM,
    REOPEN,
    RETRY_COMMIT,
    VOID_PLEDGE,
    allowed_actions,
    may,
    visible_length,
)
from reconciliation.repositories import Repositories, repositories
from reconciliation.repositories.audit import audit_event_build
from reconciliation.repositories.cases import (
    ESCALATED,
    OPEN,
    OVERRIDE_REQUESTED,
    RESOLVED,
    Case,
)
from reconciliation.repositories.claims import COMPLETED, FAILED, PENDING, Claim, ClaimTaken
from reconciliation.repositories.pledges import RECORDED
from reconciliation.services.cases import (
    CaseError,
    InvalidReason,
    NotAllowed,
    case_commit_change,
    case_load,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActionResult:
    case: Case
    applied: bool
    message: str


def _check_role(actor: Actor, action: str) -> None:
    if not may(actor.role, action):
        raise NotAllowed(f"The {actor.role} role may not {action.replace('_', ' ')}.")


def _check_reason(reason_code: str | None, reason_text: str | None) -> tuple[str, str]:
    code = (reason_code or "").strip()
    text = (reason_text or "").strip()
    if code not in REASON_CODES:
        raise InvalidReason("Choose a reason code from the list.")
    if visible_length(text) < MIN_REASON_LENGTH:
        raise InvalidReason(f"Explain the reason in at least {MIN_REASON_LENGTH} characters.")
    if len(text) > MAX_REASON_LENGTH:
        raise InvalidReason(f"Keep the reason under {MAX_REASON_LENGTH} characters.")
    return code, text


def _resolution(disposition: str, actor: Actor, **extra) -> dict:
    return {
        "disposition": disposition,
        "by": actor.username,
        "at": clock.iso(clock.now()),
        **extra,
    }


def _already(case: Case) -> ActionResult:
    return ActionResult(case, False, "That action was already applied; nothing changed.")


def _begin(
    repos: Repositories,
    *,
    case_id: str,
    actor: Actor,
    permission: str,
    reason_code: str | None,
    reason_text: str | None,
    seen_version: int | None,
    action_id: str | None,
) -> tuple[Case, bool, str, str]:
    """The checks every reasoned action starts with: role, reason, case and version.
    Returns the case, whether this action id was already applied, and the reason."""
    _check_role(actor, permission)
    code, text = _check_reason(reason_code, reason_text)
    case, done = case_load(repos, case_id, seen_version=seen_version, action_id=action_id)
    return case, done, code, text


# --- evidence-based dispositions --------------------------------------------------------


def case_dispose(
    *,
    case_id: str,
    disposition: str,
    actor: Actor,
    seen_version: int | None,
    reason_code: str | None,
    reason_text: str | None,
    action_id: str | None = None,
    repos: Repositories | None = None,
) -> ActionResult:
    """Record an evidence-based disposition: CONFIRMED_COMMITTED, RETRY_COMMIT,
    DUPLICATE_REJECTED_OK or ESCALATE."""
    repos = repos or repositories()
    case, done, code, text = _begin(
        repos,
        case_id=case_id,
        actor=actor,
        permission="dispose",
        reason_code=reason_code,
        reason_text=reason_text,
        seen_version=seen_version,
        action_id=action_id,
    )
    if done:
        return _already(case)
    if actor.role != Role.SYSTEM and disposition not in allowed_actions(
        case.case_type, case.state, actor.role
    ):
        raise CaseError(
            f"{LABELS.get(disposition, disposition)} is not available for a "
            f"{case.case_type} case in state {case.state}."
        )
    if actor.role == Role.SYSTEM and case.state not in (OPEN, ESCALATED):
        raise CaseError(f"The case is {case.state}.")
    common = dict(
        actor=actor,
        action_id=action_id,
        disposition=disposition,
        reason_code=code,
        reason_text=text,
    )
    if disposition == CONFIRMED_COMMITTED:
        return _confirm_committed(repos, case, **common)
    if disposition == DUPLICATE_REJECTED_OK:
        updated = case_commit_change(
            repos,
            case,
            action="disposition_recorded",
            changes={"state": RESOLVED, "resolution": _resolution(disposition, actor)},
            **common,
        )
        return ActionResult(updated, True, "Recorded: the duplicate was correctly rejected.")
    if disposition == ESCALATE:
        updated = case_commit_change(
            repos, case, action="case_escalated", changes={"state": ESCALATED}, **common
        )
        return ActionResult(updated, True, "Escalated.")
    if disposition == RETRY_COMMIT:
        retry = {
            "status": "queued",
            "requested_by": actor.username,
            "requested_at": clock.iso(clock.now()),
            "request_id": action_id or str(uuid.uuid4()),
        }
        updated = case_commit_change(
            repos, case, action="retry_commit_requested", changes={"retry": retry}, **common
        )
        _enqueue_retry(updated.case_id)
        return ActionResult(
            updated, True, "The commit will be retried in the background with the same token."
        )
    raise CaseError(f"Unknown disposition {disposition}.")


def _confirm_committed(repos: Repositories, case: Case, **common) -> ActionResult:
    actor = common["actor"]
    pledge = repos.pledges.get(case.intent_id, consistent=True)
    if pledge is None:
        raise CaseError(
            "A consistent read finds no pledge for this intent, so it cannot be confirmed "
            "as committed. Retry the commit or release the claim instead."
        )
    claim = repos.claims.get(case.claim_pk)
    extra = []
    if claim is not None and claim.status != COMPLETED:
        # Finalise the claim so replays are answered from it, fenced on the version read.
        extra.append(
            repos.claims.finalise_item(
                claim,
                status=COMPLETED,
                response_body=pledge.api_body(),
                expires_in_s=settings.CLAIM_COMPLETED_TTL_S,
                require_pending=False,
            )
        )
    updated = case_commit_change(
        repos,
        case,
        action="disposition_recorded",
        changes={"state": RESOLVED, "resolution": _resolution(CONFIRMED_COMMITTED, actor)},
        extra_items=extra,
        detail={"pledge": pledge.snapshot(), "claim_finalised": bool(extra)},
        **common,
    )
    return ActionResult(updated, True, "Confirmed committed: the pledge is recorded.")


def _enqueue_retry(case_id: str) -> None:
    """Queue the retry. If the broker is down the case keeps ``retry.status = queued`` and
    the sweep dispatches it again later: the request is never lost."""
    from kombu.exceptions import OperationalError

    from reconciliation.tasks.cases import retry_commit_task

    try:
        retry_commit_task.delay(case_id)
    except OperationalError as exc:
        logger.warning(
            "retry of case %s not queued (%s); the sweep will re-dispatch it",
            case_id,
            exc.__class__.__name__,
        )


def retry_commit_run(case_id: str, *, repos: Repositories | None = None) -> str:
    """Re-run the commit of a case's intent (the Celery task's body). Returns what
    happened: ``resolved``, ``committed``, ``already_committed``, ``wait:N`` or the
    failure kind. Duplicate-safe: the durable pledge key refuses a second pledge, and
    the claim's stored token is reused (same token inside the 10-minute window)."""
    from reconciliation.services import pledges as pledge_service

    repos = repos or repositories()
    actor = system_actor()
    case = repos.cases.get(case_id)
    if case is None or case.state == RESOLVED or not case.retry:
        return "nothing_to_do"
    pledge = repos.pledges.get(case.intent_id, consistent=True)
    claim = repos.claims.get(case.claim_pk)
    if pledge is None and claim is not None and claim.status == PENDING and not claim.expired():
        return f"wait:{max(1, claim.expires_at - clock.epoch())}"
    kind, superseded_by = "already_committed", None
    if pledge is None:
        claim = _retry_claim(repos, case, claim)
        outcome = pledge_service.pledge_commit(repos, claim)
        kind = outcome.kind
        successor = (
            repos.cases.get(outcome.case_id) if outcome.case_id not in (None, case_id) else None
        )
        if successor is not None and successor.state != RESOLVED:
            # The retry's own unclear outcome opened a case of its own, still open: that
            # case now carries the intent, so this one closes pointing at it (one open case).
            superseded_by = successor.case_id
        elif kind not in pledge_service.SUCCESS:
            _keep_claim_with_case(repos, claim, case_id)
    case = repos.cases.get(case_id)
    retry = dict(case.retry or {}, status=kind, finished_at=clock.iso(clock.now()))
    if kind in (*pledge_service.SUCCESS, "already_committed") or superseded_by:
        resolution = _resolution(RETRY_COMMIT, actor, outcome=kind)
        if superseded_by:
            resolution["superseded_by"] = superseded_by
        case_commit_change(
            repos,
            case,
            actor=actor,
            action="retry_commit_failed" if superseded_by else "retry_commit_succeeded",
            action_id=f"retry-{retry.get('request_id')}",
            disposition=RETRY_COMMIT,
            changes={"state": RESOLVED, "retry": retry, "resolution": resolution},
            detail={"outcome": kind, "superseded_by": superseded_by} if superseded_by else None,
        )
        if superseded_by:
            return kind
        return "committed" if kind == pledge_service.CREATED else "already_committed"
    case_commit_change(
        repos,
        case,
        actor=actor,
        action="retry_commit_failed",
        action_id=f"retry-{retry.get('request_id')}",
        disposition=RETRY_COMMIT,
        changes={"retry": retry},
        detail={"outcome": kind},
    )
    return kind


def _keep_claim_with_case(repos: Repositories, claim: Claim, case_id: str) -> None:
    """A failed retry that opened no case of its own may have left its new attempt's
    claim PENDING in the stuck-claim index: this case, still open, follows it, so the
    sweep does not open a second case for the same intent."""
    current = repos.claims.get(claim.pk)
    if (
        current is None
        or current.status != PENDING
        or current.attempt_id != claim.attempt_id
        or current.pending_shard is None
    ):
        return
    with contextlib.suppress(ClaimTaken):
        repos.claims.attach_case(current, case_id=case_id, error_code=RETRY_COMMIT)


def _retry_claim(repos: Repositories, case: Case, claim: Claim | None) -> Claim:
    """The claim a retry commits under, when a consistent read found no pledge.

    The case's own attempt, still PENDING and inside its token window, is committed again
    as it was: the identical transaction under its token, so if the first send is still
    in flight DynamoDB applies it once. Otherwise this is a new attempt with a token of
    its own: the key is claimed afresh, or re-claimed whatever its status says, since a
    COMPLETED claim whose pledge a consistent read cannot find records nothing."""
    if (
        claim is not None
        and claim.status == PENDING
        and claim.version == case.claim_version
        and claim.request_token == case.request_token
        and claim.token_evidence(clock.now())["inside_token_window"]
    ):
        return claim
    attempt = repos.claims.new_claim(
        pk=case.claim_pk,
        tenant=case.tenant,
        idempotency_key=case.idempotency_key,
        intent_id=case.intent_id,
        payload_hash=_payload_hash(case.request),
        request=case.request,
        correlation_id=system_actor().correlation_id,
        client_address="",
    )
    if claim is None:
        return repos.claims.create(attempt)
    return repos.claims.reclaim(claim, attempt=attempt)


def _payload_hash(request: dict) -> str:
    from reconciliation.pledge_request import PledgeRequest

    return PledgeRequest.from_normalised(request).payload_hash


# --- assignment -------------------------------------------------------------------------


def case_assign(
    *,
    case_id: str,
    actor: Actor,
    seen_version: int | None,
    action_id: str | None = None,
    unassign: bool = False,
    repos: Repositories | None = None,
) -> ActionResult:
    repos = repos or repositories()
    _check_role(actor, "assign")
    case, done = case_load(repos, case_id, seen_version=seen_version, action_id=action_id)
    if done:
        return _already(case)
    if case.state == RESOLVED:
        raise CaseError("A resolved case cannot be assigned.")
    assignee = None if unassign else actor.username
    changes: dict = {"assignee": assignee}
    override = case.override
    if case.state == OVERRIDE_REQUESTED and override and override["pinned_version"] == case.version:
        # Who works the case is not what a pending override depends on: the pin moves
        # with the assignment, in the same conditional write, so approval still applies.
        # It moves only while current: after a material change (state, evidence,
        # resolution) it stays behind and approval is refused as before.
        changes["override"] = {**override, "pinned_version": case.version + 1}
    updated = case_commit_change(
        repos,
        case,
        actor=actor,
        action="case_unassigned" if unassign else "case_assigned",
        action_id=action_id,
        changes=changes,
    )
    return ActionResult(updated, True, "Unassigned." if unassign else "Assigned to you.")


# --- four-eyes overrides ----------------------------------------------------------------


def override_request(
    *,
    case_id: str,
    override: str,
    actor: Actor,
    seen_version: int | None,
    reason_code: str | None,
    reason_text: str | None,
    action_id: str | None = None,
    repos: Repositories | None = None,
) -> ActionResult:
    """Ask for RELEASE_CLAIM, VOID_PLEDGE or REOPEN; a different supervisor must approve."""
    repos = repos or repositories()
    if override not in OVERRIDES:
        raise CaseError(f"Unknown override {override}.")
    case, done, code, text = _begin(
        repos,
        case_id=case_id,
        actor=actor,
        permission="override_request",
        reason_code=reason_code,
        reason_text=reason_text,
        seen_version=seen_version,
        action_id=action_id,
    )
    if done:
        return _already(case)
    if override not in allowed_actions(case.case_type, case.state, actor.role):
        raise CaseError(f"{LABELS[override]} is not available while the case is {case.state}.")
    pins: dict = {}
    if override == RELEASE_CLAIM:
        claim = repos.claims.get(case.claim_pk)
        if claim is None:
            raise CaseError("The claim no longer exists (TTL): there is nothing to release.")
        if claim.status == COMPLETED:
            raise CaseError("The claim is COMPLETED: the pledge committed; nothing to release.")
        pins["claim_version"] = claim.version
    if override == VOID_PLEDGE:
        pledge = repos.pledges.get(case.intent_id)
        if pledge is None or pledge.status != RECORDED:
            raise CaseError("There is no recorded pledge for this intent to void.")
        pins["pledge_audit_seq"] = pledge.audit_seq
    now = clock.now()
    request = {
        "request_id": str(uuid.uuid4()),
        "action": override,
        "requested_by": actor.as_audit(),
        "reason_code": code,
        "reason_text": text,
        "requested_at": clock.iso(now),
        "expires_at": clock.epoch(now) + settings.OVERRIDE_TTL_S,
        # The version after this request; only an assignment carries it forward
        # (case_assign): any other change of the case leaves it behind.
        "pinned_version": case.version + 1,
        "prior_state": case.state,
        **pins,
    }
    updated = case_commit_change(
        repos,
        case,
        actor=actor,
        action="override_requested",
        action_id=action_id,
        disposition=override,
        reason_code=code,
        reason_text=text,
        changes={"state": OVERRIDE_REQUESTED, "override": request},
    )
    return ActionResult(updated, True, f"{LABELS[override]} requested; a supervisor must approve.")


def _pending_override(case: Case, request_id: str | None) -> dict:
    override = case.override or {}
    if case.state != OVERRIDE_REQUESTED or not override:
        last = case.resolution or {}
        raise CaseError(
            f"There is no pending request on this case: it is {case.state}"
            + (f", decided by {last.get('by')} at {last.get('at')}." if last else ".")
        )
    if request_id and override.get("request_id") != request_id:
        raise CaseError("That request was already decided; a newer request is pending.")
    return override


def _begin_decision(
    repos: Repositories,
    *,
    permission: str,
    case_id: str,
    request_id: str | None,
    actor: Actor,
    reason_code: str | None,
    reason_text: str | None,
    action_id: str | None,
) -> tuple[Case, bool, dict, str, str]:
    """A supervisor's decision on a pending request: the common checks, and the request.
    Nobody decides their own request, either way (four eyes)."""
    case, done, code, text = _begin(
        repos,
        case_id=case_id,
        actor=actor,
        permission=permission,
        reason_code=reason_code,
        reason_text=reason_text,
        seen_version=None,
        action_id=action_id,
    )
    if done:
        return case, done, {}, code, text
    override = _pending_override(case, request_id)
    if override["requested_by"]["username"] == actor.username:
        raise NotAllowed("You requested this override; a different supervisor must decide it.")
    return case, done, override, code, text


def override_approve(
    *,
    case_id: str,
    request_id: str | None,
    actor: Actor,
    reason_code: str | None,
    reason_text: str | None,
    action_id: str | None = None,
    repos: Repositories | None = None,
) -> ActionResult:
    repos = repos or repositories()
    case, done, override, code, text = _begin_decision(
        repos,
        permission="override_approve",
        case_id=case_id,
        request_id=request_id,
        actor=actor,
        reason_code=reason_code,
        reason_text=reason_text,
        action_id=action_id,
    )
    if done:
        return _already(case)
    if case.version != override["pinned_version"]:
        raise CaseError(
            f"The case changed since the request (by {case.last_actor} at "
            f"{case.last_action_at}); the request no longer applies."
        )
    if clock.epoch() >= override["expires_at"]:
        raise CaseError("The request has expired; ask for it again if it is still needed.")
    action = override["action"]
    common = dict(
        actor=actor,
        action_id=action_id,
        disposition=action,
        reason_code=code,
        reason_text=text,
        detail={"request": override},
    )
    resolution = _resolution(action, actor, requested_by=override["requested_by"]["username"])
    if action == REOPEN:
        updated = case_commit_change(
            repos,
            case,
            action="override_approved",
            changes={"state": OPEN, "override": None, "resolution": None},
            **common,
        )
        return ActionResult(updated, True, "Approved: the case is open again.")
    if action == RELEASE_CLAIM:
        claim = repos.claims.get(case.claim_pk)
        extra = []
        if claim is not None:
            if claim.version != override.get("claim_version"):
                raise CaseError(
                    f"The claim changed since the request (now {claim.status} at version "
                    f"{claim.version}); releasing it could undo a newer attempt."
                )
            extra.append(
                repos.claims.finalise_item(
                    claim,
                    status=FAILED,
                    error_code="RELEASED_BY_OVERRIDE",
                    expires_in_s=0,
                    require_pending=False,
                )
            )
        updated = case_commit_change(
            repos,
            case,
            action="override_approved",
            extra_items=extra,
            changes={"state": RESOLVED, "override": None, "resolution": resolution},
            **common,
        )
        return ActionResult(updated, True, "Approved: the claim is released; the client may retry.")
    if action == VOID_PLEDGE:
        return _void(repos, case, override, resolution, **common)
    raise CaseError(f"Unknown override {action}.")


def _void(repos: Repositories, case: Case, override: dict, resolution: dict, **common):
    actor = common["actor"]
    pledge = repos.pledges.get(case.intent_id)
    if pledge is None or pledge.status != RECORDED:
        raise CaseError("The pledge is no longer RECORDED; nothing to void.")
    if pledge.audit_seq != override.get("pledge_audit_seq"):
        raise CaseError("The pledge changed since the request; ask again.")
    now = clock.now()
    event = audit_event_build(
        stream=f"PLEDGE#{pledge.intent_id}",
        seq=pledge.audit_seq + 1,
        prev_hash=pledge.audit_head,
        action="pledge_voided",
        actor=actor,
        at=now,
        case_id=case.case_id,
        intent_id=pledge.intent_id,
        before={"status": pledge.status},
        after={"status": "VOIDED"},
        disposition=VOID_PLEDGE,
        reason_code=common["reason_code"],
        reason_text=common["reason_text"],
        detail={"requested_by": override["requested_by"]["username"]},
    )
    extra = [
        repos.pledges.void_item(pledge, voided_at=clock.iso(now), audit_head=event["hash"]),
        # The void subtracts in the same transaction that marks the pledge VOIDED, so the
        # ledger always equals the sum of RECORDED pledges.
        repos.ledger.add_item(
            pledge.ledger_key,
            fund=pledge.fund,
            currency=pledge.currency,
            amount=-pledge.amount,
            count=-1,
        ),
    ]
    updated = case_commit_change(
        repos,
        case,
        action="override_approved",
        extra_items=extra,
        extra_events=[event],
        changes={"state": RESOLVED, "override": None, "resolution": resolution},
        **common,
    )
    return ActionResult(updated, True, "Approved: the pledge is voided and the ledger adjusted.")


def override_reject(
    *,
    case_id: str,
    request_id: str | None,
    actor: Actor,
    reason_code: str | None,
    reason_text: str | None,
    action_id: str | None = None,
    repos: Repositories | None = None,
) -> ActionResult:
    repos = repos or repositories()
    case, done, override, code, text = _begin_decision(
        repos,
        permission="override_reject",
        case_id=case_id,
        request_id=request_id,
        actor=actor,
        reason_code=reason_code,
        reason_text=reason_text,
        action_id=action_id,
    )
    if done:
        return _already(case)
    updated = case_commit_change(
        repos,
        case,
        actor=actor,
        action="override_rejected",
        action_id=action_id,
        disposition=override["action"],
        reason_code=code,
        reason_text=text,
        detail={"request": override},
        changes={"state": _prior_state(override), "override": None},
    )
    return ActionResult(updated, True, "Rejected: the case is back where it was.")


def _prior_state(override: dict) -> str:
    # Rejecting or expiring a request returns the case to OPEN, or to where it was
    # (ESCALATED; RESOLVED for a declined REOPEN).
    return override.get("prior_state") or OPEN


def overrides_expire(*, repos: Repositories | None = None) -> list[str]:
    """Return expired override requests to their prior state, by ``system``. Queries
    the approval queue only (its cost grows with pending requests)."""
    from reconciliation.repositories.cases import QUEUE_APPROVAL

    repos = repos or repositories()
    actor = system_actor()
    expired: list[str] = []
    now = clock.epoch()
    for row in repos.cases.walk_queue(QUEUE_APPROVAL):
        override = row.get("override")
        if not override or override.get("expires_at", now + 1) > now:
            continue
        case = repos.cases.get(row["case_id"])
        if case is None or case.state != OVERRIDE_REQUESTED:
            continue
        try:
            case_commit_change(
                repos,
                case,
                actor=actor,
                action="override_expired",
                action_id=f"expire-{override['request_id']}",
                disposition=override["action"],
                detail={"request": override},
                changes={"state": _prior_state(override), "override": None},
            )
            expired.append(case.case_id)
        except CaseError:
            continue  # someone decided it meanwhile
    return expired


# --- bulk work --------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkRow:
    case_id: str
    ok: bool
    message: str
    becomes: str = ""


def cases_bulk(
    *,
    case_ids: list[str],
    disposition: str,
    actor: Actor,
    reason_code: str | None,
    reason_text: str | None,
    dry_run: bool,
    action_id: str | None = None,
    repos: Repositories | None = None,
) -> list[BulkRow]:
    """Apply one disposition to many cases, each its own audited change; or, with
    ``dry_run``, say what each case would become without writing anything."""
    repos = repos or repositories()
    _check_role(actor, "dispose")
    if disposition not in BULK_DISPOSITIONS:
        raise CaseError(f"{LABELS.get(disposition, disposition)} cannot be applied in bulk.")
    code, text = _check_reason(reason_code, reason_text)
    rows: list[BulkRow] = []
    for case_id in dict.fromkeys(case_ids):
        case = repos.cases.get(case_id)
        if case is None:
            rows.append(BulkRow(case_id, False, "No such case."))
            continue
        if disposition not in allowed_actions(case.case_type, case.state, actor.role):
            rows.append(
                BulkRow(
                    case_id, False, f"Not available for a {case.case_type} case in {case.state}."
                )
            )
            continue
        becomes = {
            ESCALATE: ESCALATED,
            DUPLICATE_REJECTED_OK: RESOLVED,
            RETRY_COMMIT: f"{case.state}, commit retried",
        }[disposition]
        if dry_run:
            rows.append(BulkRow(case_id, True, f"{case.state} → {becomes}", becomes))
            continue
        try:
            result = case_dispose(
                case_id=case_id,
                disposition=disposition,
                actor=actor,
                seen_version=case.version,
                reason_code=code,
                reason_text=text,
                action_id=f"{action_id}:{case_id}" if action_id else None,
                repos=repos,
            )
            rows.append(BulkRow(case_id, True, result.message, result.case.state))
        except CaseError as exc:
            rows.append(BulkRow(case_id, False, str(exc)))
    return rows
