"""How a pledge commit that did not succeed is answered (docs/design.md §4).

The outcome rule: once any attempt may have applied, the answer is success or 202,
never a definite failure. A cancelled transaction is decoded and answered from its
reasons; an unclear one opens a reconciliation case, which takes the claim with it in
the same transaction, and the durable record answers later. The cases it opens and the
claim's quiet, fenced moves are at the end of this module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock, metrics
from reconciliation.actors import Actor, Role
from reconciliation.cases.models import ClientOutcome
from reconciliation.cases.vocabulary import CaseState, CaseType
from reconciliation.claims.models import Claim, ClaimStatus, Pledge
from reconciliation.claims.opening import CaseCause, case_build, case_open
from reconciliation.claims.outcomes import (
    IntakeOutcome,
    OutcomeKind,
    in_progress_outcome,
    retry_after_s,
    throttled_outcome,
    unavailable_outcome,
)
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository, ClaimTaken, Finalisation
from reconciliation.claims.request import PledgeRequest
from reconciliation.claims.versions import VERSIONS
from reconciliation.dynamo import attempts
from reconciliation.dynamo.cancellation import (
    Branch,
    DecodedReason,
    cancellation_decode,
    overall_branch,
)
from reconciliation.dynamo.errors import DYNAMO_ERROR_CODE, ErrorCode, error_code, log_fields
from reconciliation.dynamo.retry import (
    THROTTLING_REASONS,
    RetriesExhausted,
    transient_code,
    with_retry,
)
from reconciliation.stores import Store

logger = logging.getLogger(__name__)


def _server_error(exc: BaseException) -> bool:
    if not isinstance(exc, ClientError):
        return False
    status: int = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status >= 500


def commit_failed(
    store: Store,
    claim: Claim,
    items: list[dict[str, Any]],
    exc: BotoCoreError | ClientError | RetriesExhausted,
    *,
    fresh: bool,
    maybe: bool,
) -> IntakeOutcome:
    """Answer a commit that did not succeed; ``maybe``: an attempt may have applied."""
    last = exc.last if isinstance(exc, RetriesExhausted) else exc
    if isinstance(exc, ClientError) and error_code(exc) == ErrorCode.TRANSACTION_CANCELED:
        rows = cancellation_decode(items, exc.response, store.roles())
        if overall_branch(rows) == Branch.DUPLICATE:
            # The pledge exists: the durable record answers, whatever came before.
            try:
                return _cancelled(store, claim, rows, exc, fresh=fresh)
            except (BotoCoreError, ClientError, RetriesExhausted):
                if not maybe:
                    raise
                return _ambiguous(store, claim, exc)
        if not maybe:
            return _cancelled(store, claim, rows, exc, fresh=fresh)
    if (
        maybe
        or _server_error(last)
        or (isinstance(exc, BotoCoreError) and not isinstance(exc, attempts.NEVER_SENT))
    ):
        return _ambiguous(store, claim, last)
    if isinstance(exc, RetriesExhausted):
        return _commit_exhausted(store, claim, items, exc)
    if isinstance(exc, BotoCoreError):
        # The commit never left this process: nothing applied, the client retries.
        finalise_quietly(
            store,
            claim,
            Finalisation(
                status=ClaimStatus.FAILED, error_code=error_code(exc), expires_in_s=retry_after_s()
            ),
        )
        return unavailable_outcome(exc)
    if error_code(exc) == ErrorCode.TOKEN_MISMATCH:
        return _token_mismatch(store, claim, exc)
    return _refused(exc)


def _refused(exc: ClientError) -> IntakeOutcome:
    """DynamoDB refused the call itself (AccessDenied, Validation…): nothing was written.
    The claim stays PENDING in the stuck-claim index, so the sweep opens its case if the
    client does not come back; the client hears a definite, JSON answer."""
    code = error_code(exc)
    logger.error("commit refused by DynamoDB: %s", code, extra=log_fields(exc))
    if code == ErrorCode.VALIDATION:
        return IntakeOutcome(
            OutcomeKind.REJECTED,
            detail=f"DynamoDB rejected the request ({code}); nothing was recorded.",
        )
    return IntakeOutcome(
        OutcomeKind.UNAVAILABLE,
        retry_after=retry_after_s(),
        detail=f"DynamoDB refused the request ({code}); nothing was recorded. Retry later.",
    )


def _commit_exhausted(
    store: Store, claim: Claim, items: list[dict[str, Any]], exc: RetriesExhausted
) -> IntakeOutcome:
    """Every attempt met a transient refusal and none may have applied: a definite
    failure. Throttling (a transaction cancelled for a throttled item included) releases
    the claim with its reason and answers 503; a conflict that never cleared opens a case
    with the claim's release."""
    retry_after = retry_after_s()
    if exc.throttled:
        finalise_quietly(
            store,
            claim,
            Finalisation(
                status=ClaimStatus.FAILED, error_code=exc.reason, expires_in_s=retry_after
            ),
        )
        return throttled_outcome(exc)
    logger.warning("commit conflicted past the retry budget: %s", exc.reason, extra=log_fields(exc))
    rows = cancellation_decode(items, exc.last.response, store.roles())
    case = open_case(
        store,
        claim,
        _error_cause(CaseType.CANCELLED_TRANSACTION, exc.last, OutcomeKind.CONFLICT, rows),
        claim_move=lambda case_id: ClaimRepository(store).finalise_item(
            claim,
            status=ClaimStatus.FAILED,
            error_code=exc.reason,
            expires_in_s=retry_after,
            case_id=case_id,
        ),
    )
    return IntakeOutcome(
        OutcomeKind.CONFLICT,
        retry_after=retry_after,
        case_id=case,
        decoded=[r.to_json() for r in rows],
        detail="The transaction kept conflicting with concurrent writes; nothing was "
        "recorded. Retry with the same Idempotency-Key.",
    )


def _cancelled(
    store: Store, claim: Claim, rows: list[DecodedReason], exc: ClientError, *, fresh: bool
) -> IntakeOutcome:
    decoded = [r.to_json() for r in rows]
    branch = overall_branch(rows)

    def cancelled_case(
        kind: OutcomeKind, claim_move: Callable[[str], dict[str, Any]] | None = None
    ) -> str | None:
        return open_case(
            store,
            claim,
            _error_cause(CaseType.CANCELLED_TRANSACTION, exc, kind, rows),
            claim_move=claim_move,
        )

    if branch == Branch.DUPLICATE:
        existing = _duplicate_settle(store, claim, exc, fresh=fresh)
        if _same_request(existing.normalised_request(), claim.request):
            return IntakeOutcome(OutcomeKind.REPLAYED, pledge=existing.api_body(), decoded=decoded)
        case = cancelled_case(OutcomeKind.KEY_REUSED)
        return IntakeOutcome(
            OutcomeKind.KEY_REUSED,
            case_id=case,
            decoded=decoded,
            detail="A pledge with this Idempotency-Key exists with a different body.",
        )
    if branch == Branch.LOST_CLAIM:
        return _lost_claim(store, claim, decoded, cancelled_case)
    retryable = branch == Branch.RETRYABLE
    kind = OutcomeKind.CANCELLED if retryable else OutcomeKind.REJECTED
    # The claim is released in the case's own transaction: if the case cannot be
    # written, the claim stays PENDING in the stuck-claim index and the sweep opens it.
    case = cancelled_case(
        kind,
        lambda case_id: ClaimRepository(store).finalise_item(
            claim,
            status=ClaimStatus.FAILED,
            error_code=branch,
            expires_in_s=settings.CLAIM_FAILED_TTL_S,
            case_id=case_id,
        ),
    )
    return IntakeOutcome(
        kind,
        case_id=case,
        decoded=decoded,
        retry_after=retry_after_s() if retryable else None,
        detail="DynamoDB cancelled the transaction; nothing was recorded.",
    )


def _lost_claim(
    store: Store,
    claim: Claim,
    decoded: list[dict[str, Any]],
    cancelled_case: Callable[[OutcomeKind], str | None],
) -> IntakeOutcome:
    """The claim was taken over during the commit: a replay when the successor recorded
    this very request, else the case that carries the intent (the successor's, or one
    of this attempt's own)."""
    current = with_retry(lambda: ClaimRepository(store).get(claim.pk))
    if _replays(claim, current):
        # A late worker (stalled past its lease, or its clock behind) whose successor
        # recorded this very request: the answer is a clean replay and nothing is left
        # to reconcile, so no case; the stall is counted.
        metrics.LATE_COMMITS_REPLAYED.inc()
        logger.info("late commit of claim v%s answered as a replay", claim.version)
        return _lost_claim_outcome(claim, current, None, decoded)
    if current is not None and _followed(current):
        # The successor's attempt is already followed by a case (the sweep's, carried
        # on by a RETRY_COMMIT's re-claim that then failed): that case carries the
        # intent. A case of this attempt's own would be a second one, left open once
        # the first is decided (a release approved, say).
        return _lost_claim_outcome(claim, current, current.case_id, decoded)
    case = cancelled_case(OutcomeKind.IN_PROGRESS)
    return _lost_claim_outcome(claim, current, case, decoded)


def _same_request(recorded: dict[str, Any], attempted: dict[str, Any]) -> bool:
    """Whether two normalised requests are one: amounts compare as numbers, so a claim
    written when every amount had two places ("1000.00" JPY) matches its pledge read
    back today ("1000")."""
    return PledgeRequest.from_normalised(recorded) == PledgeRequest.from_normalised(attempted)


def _duplicate_settle(store: Store, claim: Claim, exc: ClientError, *, fresh: bool) -> Pledge:
    """Read the pledge a duplicate cancellation hit; complete the claim with its answer."""
    existing = with_retry(lambda: PledgeRepository(store).get(claim.intent_id))
    if existing is None:  # pragma: no cover - a condition failed on a missing item
        raise exc
    if fresh:
        # Our claim was new, yet the pledge existed: TTL deleted the earlier claim before the retry.
        metrics.TTL_DELETE_BEFORE_RETRY.inc()
    finalise_quietly(
        store,
        claim,
        Finalisation(
            status=ClaimStatus.COMPLETED,
            response_body=existing.api_body(),
            # Hashed by the claim's version: its later replays are compared by those rules.
            payload_hash=VERSIONS.stored(claim.pledge_version).payload_hash(
                PledgeRequest.from_normalised(existing.normalised_request())
            ),
            expires_in_s=settings.CLAIM_COMPLETED_TTL_S,
        ),
    )
    return existing


def _replays(claim: Claim, current: Claim | None) -> bool:
    """Whether the claim's current holder completed with this very request."""
    return bool(
        current
        and current.status == ClaimStatus.COMPLETED
        and current.payload_hash == claim.payload_hash
    )


def _followed(current: Claim) -> bool:
    """Whether the claim's current holder is already followed by a case: a claim names
    its case (``case_id``: the sweep's, or a retry's kept with its case), and a
    re-claim carries it on, whether the new attempt is still PENDING or failed since."""
    return current.status != ClaimStatus.COMPLETED and bool(current.case_id)


def _lost_claim_outcome(
    claim: Claim, current: Claim | None, case: str | None, decoded: list[dict[str, Any]]
) -> IntakeOutcome:
    if current is not None and _replays(claim, current):
        return IntakeOutcome(
            OutcomeKind.REPLAYED, pledge=current.response, decoded=decoded, case_id=case
        )
    outcome = in_progress_outcome(current)
    return IntakeOutcome(
        OutcomeKind.IN_PROGRESS,
        retry_after=outcome.retry_after,
        case_id=case,
        decoded=decoded,
        detail="This attempt lost its claim to a newer one; nothing was recorded by it.",
    )


def _token_mismatch(store: Store, claim: Claim, exc: ClientError) -> IntakeOutcome:
    return _case_for_pending_claim(
        store,
        claim,
        exc,
        CaseType.TOKEN_MISMATCH,
        OutcomeKind.TOKEN_PARAMETER_MISMATCH,
        "DynamoDB saw a different transaction under this request's token within its "
        "10-minute window; nothing was recorded by this request. Staff will reconcile it.",
    )


def _ambiguous(store: Store, claim: Claim, exc: BaseException) -> IntakeOutcome:
    """The transaction may or may not have committed. Never mint a new token: record the
    doubt as a case and let the durable record answer later."""
    logger.warning(
        "commit outcome unknown claim_version=%s error=%s",
        claim.version,
        error_code(exc),
        extra=log_fields(exc),
    )
    return _case_for_pending_claim(
        store,
        claim,
        exc,
        CaseType.AMBIGUOUS_TIMEOUT,
        OutcomeKind.OUTCOME_UNKNOWN,
        "The acknowledgement was lost: the pledge may or may not be recorded. "
        "GET this pledge to learn the outcome; do not resend with a new key.",
    )


def _case_for_pending_claim(
    store: Store,
    claim: Claim,
    exc: BaseException,
    case_type: CaseType,
    kind: OutcomeKind,
    detail: str,
) -> IntakeOutcome:
    """Open a case for a claim left PENDING by an unclear commit, and hand the claim to
    the case (out of the stuck-claim index) in the same transaction."""
    case = open_case(
        store,
        claim,
        _error_cause(case_type, exc, kind),
        claim_move=lambda case_id: ClaimRepository(store).attach_item(
            claim, case_id=case_id, error_code=case_type
        ),
    )
    return IntakeOutcome(kind, case_id=case, detail=detail)


# --- what an unanswered commit leaves behind: the case it opens (with the claim's move in
# the same transaction) and the claim's quiet, fenced moves -------------------------------


def _claim_actor(claim: Claim, *, username: str, role: Role) -> Actor:
    """Who acts on ``claim``, with the address and correlation id of its request."""
    return Actor(
        username=username,
        role=role,
        address=claim.client_address,
        correlation_id=claim.correlation_id,
    )


def pledge_receipt_actor(claim: Claim) -> Actor:
    return _claim_actor(claim, username=f"api:{claim.tenant}", role=Role.API)


def open_case(
    store: Store,
    claim: Claim,
    cause: CaseCause,
    *,
    claim_move: Callable[[str], dict[str, Any]] | None = None,
) -> str | None:
    """Open the case for this claim version, with the claim's move (``claim_move``,
    given the case id) in the same transaction. If it cannot be written the claim stays
    PENDING in the stuck-claim index, where the sweep will find it: nothing is lost."""
    case = case_build(
        claim=claim,
        cause=cause,
        opened_by=pledge_receipt_actor(claim),
        now=clock.now(),
        region_tag=store.tag,
    )
    claim_item = claim_move(case.case_id) if claim_move else None
    try:
        stored, created = case_open(
            store, case=case, actor=_system_for(claim), claim_item=claim_item
        )
    except (BotoCoreError, ClientError, RetriesExhausted) as exc:
        fields = log_fields(exc)
        logger.error(
            "could not open %s case: %s", cause.case_type, fields[DYNAMO_ERROR_CODE], extra=fields
        )
        return None
    if not created and claim_item is not None and stored.state != CaseState.RESOLVED:
        # The case already existed, open (an earlier attempt of this very opening, or the
        # sweep's on the same question): the claim may now follow it on its own. A
        # resolved case follows nothing: the claim stays where the sweep can find it.
        apply_quietly(store, claim_item)
    return stored.case_id


def _error_cause(
    case_type: CaseType,
    error: BaseException,
    kind: OutcomeKind,
    decoded: Sequence[DecodedReason] = (),
) -> CaseCause:
    """The cause of a case ``error`` leaves, the client told ``kind``."""
    return CaseCause(
        case_type,
        # A throttled cancellation is recorded as the throttling it was (its decoded rows,
        # where the case keeps them, name every item's reason).
        evidence={"error_code": _recorded_code(error), "error_message": str(error)[:500]},
        decoded=decoded,
        client_outcome=ClientOutcome(error=kind),
    )


def _recorded_code(error: BaseException) -> str:
    """The code a case records for ``error``: a cancelled transaction's throttling reason
    when an item was throttled, else the error's own code."""
    code = transient_code(error)
    return code if code in THROTTLING_REASONS else error_code(error)


def apply_quietly(store: Store, claim_item: dict[str, Any]) -> None:
    try:
        store.client.update_item(**claim_item["Update"])
    except (BotoCoreError, ClientError) as exc:
        # A failed fence means the claim moved on (committed, or a successor holds it).
        logger.info("claim not moved to its case: %s", error_code(exc), extra=log_fields(exc))


def _system_for(claim: Claim) -> Actor:
    return _claim_actor(claim, username="system", role=Role.SYSTEM)


def finalise_quietly(store: Store, claim: Claim, end: Finalisation) -> None:
    """Fenced transition after a definitive outcome. If it fails the claim stays PENDING
    and the sweep takes over; the caller's answer does not depend on it."""
    try:
        ClaimRepository(store).finalise(claim, end)
    except ClaimTaken:
        pass
    except (BotoCoreError, ClientError) as exc:
        logger.warning("could not finalise claim: %s", error_code(exc), extra=log_fields(exc))
