"""The exactly-once pledge write path (DESIGN.md §4).

1. **Claim**: a conditional PutItem creates a PENDING claim; a duplicate learns the
   existing claim from ALL_OLD in the same round trip. FAILED or expired PENDING claims
   are re-claimed with a version-fenced UpdateItem that keeps the stored token.
2. **Commit**: one ``TransactWriteItems`` with the claim's ``ClientRequestToken``: the
   pledge Put (``attribute_not_exists``), the ledger Update, the audit receipt Put and the
   claim's PENDING→COMPLETED Update fenced on its version.

Every unclean outcome opens a reconciliation case. Outcomes are returned as
:class:`IntakeOutcome`; the view maps them to HTTP.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock, metrics
from reconciliation.actors import Actor, Role
from reconciliation.cancellation import (
    DUPLICATE,
    LOST_CLAIM,
    RETRYABLE,
    DecodedReason,
    cancellation_decode,
    overall_branch,
)
from reconciliation.dynamo import attempts, faults
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.retry import RetriesExhausted, with_retry
from reconciliation.pledge_request import PledgeRequest
from reconciliation.repositories import Repositories, repositories_for_key
from reconciliation.repositories.audit import GENESIS_HASH, audit_event_build
from reconciliation.repositories.cases import (
    AMBIGUOUS_TIMEOUT,
    CANCELLED_TRANSACTION,
    RESOLVED,
    TOKEN_MISMATCH,
)
from reconciliation.repositories.claims import (
    COMPLETED,
    FAILED,
    OPERATION_CREATE_PLEDGE,
    PENDING,
    Claim,
    ClaimTaken,
    claim_pk,
)
from reconciliation.repositories.ledger import ledger_key_for
from reconciliation.repositories.pledges import RECORDED, Pledge, intent_id_for
from reconciliation.services.cases import case_build, case_open

logger = logging.getLogger(__name__)

RECEIPT_NAMESPACE = uuid.UUID("6f1c1d5e-8f4a-4f61-9a53-2d0f4b1e7a10")

# Outcome kinds (the view maps each to its HTTP status).
CREATED = "created"
REPLAYED = "replayed"
IN_PROGRESS = "request_in_progress"
KEY_REUSED = "idempotency_key_reused"
THROTTLED = "throttled"
UNAVAILABLE = "dynamodb_unavailable"
CONFLICT = "transaction_conflict"
CANCELLED = "transaction_cancelled"
REJECTED = "transaction_rejected"
TOKEN_PARAMETER_MISMATCH = "token_parameter_mismatch"
OUTCOME_UNKNOWN = "outcome_unknown"
SUCCESS = (CREATED, REPLAYED)


@dataclass(frozen=True)
class IntakeOutcome:
    kind: str
    pledge: dict | None = None
    retry_after: int | None = None
    case_id: str | None = None
    detail: str = ""
    decoded: list[dict] = field(default_factory=list)


def pledge_receipt_actor(claim: Claim) -> Actor:
    return Actor(
        username=f"api:{claim.tenant}",
        role=Role.API,
        address=claim.client_address,
        correlation_id=claim.correlation_id,
    )


def pledge_submit(
    *,
    tenant: str,
    idempotency_key: str,
    request: PledgeRequest,
    actor: Actor,
    lease_s: int | None = None,
) -> IntakeOutcome:
    """Record ``request`` exactly once for ``(tenant, idempotency_key)``. The claim is
    held for ``lease_s`` seconds (default ``CLAIM_PENDING_TTL_S``)."""
    started = time.monotonic()
    pk = claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key)
    repos = repositories_for_key(pk)
    try:
        outcome = _claim(repos, pk, tenant, idempotency_key, request, actor, lease_s)
        if isinstance(outcome, IntakeOutcome):
            return _count(outcome)
        claim, fresh = outcome
        # The worker may die here, between claim and commit: the sweep finds the claim.
        faults.crash_after_claim()
        return _count(pledge_commit(repos, claim, fresh=fresh))
    except (BotoCoreError, RetriesExhausted) as exc:
        # A read after a definitive outcome failed (every write outcome that may have
        # committed is handled inside pledge_commit): the claim stays as it is, the
        # client retries later.
        return _count(_unavailable(exc))
    except ClientError as exc:
        # A read or claim write refused outright (AccessDenied, Validation…): nothing of
        # this request was committed (the commit answers for itself), so a definite 503.
        return _count(_unavailable(exc))
    finally:
        metrics.COMMIT_SECONDS.observe(time.monotonic() - started)


def _server_error(exc: BaseException) -> bool:
    if not isinstance(exc, ClientError):
        return False
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500


def _count(outcome: IntakeOutcome) -> IntakeOutcome:
    metrics.PLEDGE_OUTCOMES.labels(outcome.kind).inc()
    return outcome


def _claim(
    repos: Repositories,
    pk: str,
    tenant: str,
    idempotency_key: str,
    request: PledgeRequest,
    actor: Actor,
    lease_s: int | None,
) -> tuple[Claim, bool] | IntakeOutcome:
    """Acquire the claim, or answer without one (replay, reuse, in progress)."""
    mine = repos.claims.new_claim(
        pk=pk,
        tenant=tenant,
        idempotency_key=idempotency_key,
        intent_id=intent_id_for(tenant, idempotency_key),
        payload_hash=request.payload_hash,
        request=request.normalised(),
        correlation_id=actor.correlation_id,
        client_address=actor.address,
        lease_s=lease_s,
    )

    def take(existing: Claim | None) -> tuple[Claim, bool]:
        if existing is None:
            # First claim, or the item vanished (TTL) since: the durable pledge record
            # still decides at commit.
            return repos.claims.create(mine), True
        return repos.claims.reclaim(existing, attempt=mine), False

    existing: Claim | None = None
    for _ in range(4):
        if existing is not None:
            if existing.attempt_id == mine.attempt_id:
                # The SDK sent our own PutItem or re-claim again after a lost response:
                # the claim is ours (a re-claim carries this request's attempt id too).
                metrics.CLAIMS.labels("own_retry").inc()
                return existing, existing.version == 1
            verdict = _judge_existing(repos, existing, request)
            if verdict is not None:
                return verdict
        try:
            claim, fresh = with_retry(lambda existing=existing: take(existing))
        except ClaimTaken as taken:
            existing = taken.current  # someone else holds or changed it: judge again
            continue
        except RetriesExhausted as exc:
            return _throttled(exc)
        except (BotoCoreError, ClientError) as exc:
            return _unavailable(exc)
        metrics.CLAIMS.labels("created" if fresh else "reclaimed").inc()
        return claim, fresh
    return _in_progress(existing)


def _judge_existing(
    repos: Repositories, existing: Claim, request: PledgeRequest
) -> IntakeOutcome | None:
    """Answer from an existing claim, or ``None`` when it may be re-claimed."""
    if existing.payload_hash != request.payload_hash:
        metrics.CLAIMS.labels("key_reused").inc()
        return IntakeOutcome(
            KEY_REUSED,
            detail="This Idempotency-Key was used with a different request body.",
        )
    now = clock.epoch()
    if existing.status == COMPLETED:
        metrics.CLAIMS.labels("replay").inc()
        if not existing.expired(now) and existing.response:
            return IntakeOutcome(REPLAYED, pledge=existing.response)
        # Past its expiry the cached answer is not trusted: the durable record is.
        pledge = with_retry(lambda: repos.pledges.get(existing.intent_id))
        if pledge is not None:
            return IntakeOutcome(REPLAYED, pledge=pledge.api_body())
        return None
    if not existing.expired(now):
        metrics.CLAIMS.labels("in_progress").inc()
        return _in_progress(existing)
    return None


def _in_progress(existing: Claim | None) -> IntakeOutcome:
    wait = 1
    if existing is not None:
        wait = max(1, existing.expires_at - clock.epoch())
    return IntakeOutcome(
        IN_PROGRESS,
        retry_after=wait,
        detail="A request with this Idempotency-Key is being processed; retry later.",
    )


def retry_after_s() -> int:
    """Seconds a client should wait before retrying when DynamoDB is busy or away."""
    return max(1, math.ceil(settings.DDB_APP_RETRY_CAP_S * 2))


def _throttled(exc: RetriesExhausted) -> IntakeOutcome:
    return IntakeOutcome(
        THROTTLED,
        retry_after=retry_after_s(),
        detail=f"DynamoDB throttled the request ({exc.code}) past the retry budget.",
    )


def _unavailable(exc: BaseException) -> IntakeOutcome:
    logger.warning("claim failed: %s", error_code(exc))
    return IntakeOutcome(
        UNAVAILABLE,
        retry_after=retry_after_s(),
        detail="DynamoDB could not be reached; nothing was recorded. Retry later.",
    )


def pledge_for_claim(claim: Claim) -> tuple[Pledge, dict]:
    """The pledge and its receipt event for ``claim``. A pure function of the claim, so
    every retry of one commit sends a byte-identical transaction under its token."""
    request = claim.request
    ledger_key = ledger_key_for(request["fund"], request["currency"], claim.intent_id)
    pledge = Pledge(
        intent_id=claim.intent_id,
        tenant=claim.tenant,
        donor_ref=request["donor_ref"],
        fund=request["fund"],
        amount=PledgeRequest.from_normalised(request).amount,
        currency=request["currency"],
        status=RECORDED,
        request_token=claim.request_token,
        created_at=claim.claimed_at,
        ledger_key=ledger_key,
    )
    receipt = audit_event_build(
        stream=f"PLEDGE#{claim.intent_id}",
        seq=1,
        prev_hash=GENESIS_HASH,
        action="pledge_recorded",
        actor=pledge_receipt_actor(claim),
        at=claim.claimed,
        event_id=str(uuid.uuid5(RECEIPT_NAMESPACE, f"{claim.request_token}:{claim.version}")),
        intent_id=claim.intent_id,
        after=pledge.snapshot(),
    )
    pledge = Pledge(**{**pledge.__dict__, "audit_seq": 1, "audit_head": receipt["hash"]})
    return pledge, receipt


def commit_items(repos: Repositories, claim: Claim) -> tuple[list[dict], Pledge]:
    pledge, receipt = pledge_for_claim(claim)
    items = [
        repos.pledges.put_item(pledge),
        repos.ledger.add_item(
            pledge.ledger_key,
            fund=pledge.fund,
            currency=pledge.currency,
            amount=pledge.amount,
            count=1,
        ),
        repos.audit.put_item(receipt),
        repos.claims.complete_item(claim, pledge.api_body()),
    ]
    return items, pledge


def pledge_commit(repos: Repositories, claim: Claim, *, fresh: bool = False) -> IntakeOutcome:
    """Run the commit transaction for a claim this caller holds.

    The outcome rule (DESIGN.md §4): once any attempt may have applied — a timeout after
    the request was sent, a lost response, a 5xx, including the SDK's own attempts that
    the final error hides — the answer is success or 202, never a definite failure,
    whatever the later attempts said."""
    items, pledge = commit_items(repos, claim)

    def transact() -> None:
        repos.client.transact_write_items(
            TransactItems=items, ClientRequestToken=claim.request_token
        )

    with attempts.watch() as log:
        try:
            with_retry(transact)
        except (BotoCoreError, ClientError, RetriesExhausted) as exc:
            failure: BotoCoreError | ClientError | RetriesExhausted = exc
        else:
            return IntakeOutcome(CREATED, pledge=pledge.api_body())
    return _commit_failed(repos, claim, items, failure, fresh=fresh, maybe=log.maybe_applied)


def _commit_failed(
    repos: Repositories,
    claim: Claim,
    items: list[dict],
    exc: BotoCoreError | ClientError | RetriesExhausted,
    *,
    fresh: bool,
    maybe: bool,
) -> IntakeOutcome:
    """Answer a commit that did not succeed; ``maybe``: an attempt may have applied."""
    last = exc.last if isinstance(exc, RetriesExhausted) else exc
    if isinstance(exc, ClientError) and error_code(exc) == "TransactionCanceledException":
        rows = cancellation_decode(items, exc.response, repos.roles())
        if overall_branch(rows) == DUPLICATE:
            # The pledge exists: the durable record answers, whatever came before.
            try:
                return _cancelled(repos, claim, rows, exc, fresh=fresh)
            except (BotoCoreError, ClientError, RetriesExhausted):
                if not maybe:
                    raise
                return _ambiguous(repos, claim, exc)
        if not maybe:
            return _cancelled(repos, claim, rows, exc, fresh=fresh)
    if (
        maybe
        or _server_error(last)
        or (isinstance(exc, BotoCoreError) and not isinstance(exc, attempts.NEVER_SENT))
    ):
        return _ambiguous(repos, claim, last)
    if isinstance(exc, RetriesExhausted):
        return _commit_exhausted(repos, claim, items, exc)
    if isinstance(exc, BotoCoreError):
        # The commit never left this process: nothing applied, the client retries.
        _finalise_quietly(
            repos, claim, status=FAILED, error=error_code(exc), expires_in_s=retry_after_s()
        )
        return _unavailable(exc)
    if error_code(exc) == "IdempotentParameterMismatchException":
        return _token_mismatch(repos, claim, exc)
    return _refused(exc)


def _refused(exc: ClientError) -> IntakeOutcome:
    """DynamoDB refused the call itself (AccessDenied, Validation…): nothing was written.
    The claim stays PENDING in the stuck-claim index, so the sweep opens its case if the
    client does not come back; the client hears a definite, JSON answer."""
    code = error_code(exc)
    logger.error("commit refused by DynamoDB: %s", code)
    if code == "ValidationException":
        return IntakeOutcome(
            REJECTED,
            detail=f"DynamoDB rejected the request ({code}); nothing was recorded.",
        )
    return IntakeOutcome(
        UNAVAILABLE,
        retry_after=retry_after_s(),
        detail=f"DynamoDB refused the request ({code}); nothing was recorded. Retry later.",
    )


def _commit_exhausted(
    repos: Repositories, claim: Claim, items: list[dict], exc: RetriesExhausted
) -> IntakeOutcome:
    """Every attempt met a transient refusal and none may have applied: a definite
    failure. A conflict that never cleared opens a case with the claim's release."""
    retry_after = retry_after_s()
    if exc.code == "TransactionCanceledException":
        rows = cancellation_decode(items, exc.last.response, repos.roles())
        case = _open_case(
            repos,
            claim,
            CANCELLED_TRANSACTION,
            decoded=rows,
            error=exc.last,
            client_outcome={"http_status": 409, "error": CONFLICT},
            claim_move=lambda case_id: repos.claims.finalise_item(
                claim,
                status=FAILED,
                error_code="TransactionConflict",
                expires_in_s=retry_after,
                case_id=case_id,
            ),
        )
        return IntakeOutcome(
            CONFLICT,
            retry_after=retry_after,
            case_id=case,
            decoded=[r.as_dict() for r in rows],
            detail="The transaction kept conflicting with concurrent writes; nothing was "
            "recorded. Retry with the same Idempotency-Key.",
        )
    _finalise_quietly(repos, claim, status=FAILED, error=exc.code, expires_in_s=retry_after)
    return _throttled(exc)


def _cancelled(
    repos: Repositories,
    claim: Claim,
    rows: list[DecodedReason],
    exc: ClientError,
    *,
    fresh: bool,
) -> IntakeOutcome:
    decoded = [r.as_dict() for r in rows]
    branch = overall_branch(rows)

    def cancelled_case(
        http_status: int, kind: str, claim_move: Callable[[str], dict] | None = None
    ) -> str | None:
        return _open_case(
            repos,
            claim,
            CANCELLED_TRANSACTION,
            decoded=rows,
            error=exc,
            client_outcome={"http_status": http_status, "error": kind},
            claim_move=claim_move,
        )

    if branch == DUPLICATE:
        existing = with_retry(lambda: repos.pledges.get(claim.intent_id))
        if existing is None:  # pragma: no cover - a condition failed on a missing item
            raise exc
        if fresh:
            # Our claim was new, yet the pledge existed: the earlier claim was deleted
            # by TTL before the client retried.
            metrics.TTL_DELETE_BEFORE_RETRY.inc()
        same = existing.normalised_request() == claim.request
        _finalise_quietly(
            repos,
            claim,
            status=COMPLETED,
            response=existing.api_body(),
            payload_hash=PledgeRequest.from_normalised(existing.normalised_request()).payload_hash,
            expires_in_s=settings.CLAIM_COMPLETED_TTL_S,
        )
        if same:
            return IntakeOutcome(REPLAYED, pledge=existing.api_body(), decoded=decoded)
        case = cancelled_case(422, KEY_REUSED)
        return IntakeOutcome(
            KEY_REUSED,
            case_id=case,
            decoded=decoded,
            detail="A pledge with this Idempotency-Key exists with a different body.",
        )
    if branch == LOST_CLAIM:
        current = with_retry(lambda: repos.claims.get(claim.pk))
        case = cancelled_case(409, IN_PROGRESS)
        if current and current.status == COMPLETED and current.payload_hash == claim.payload_hash:
            return IntakeOutcome(REPLAYED, pledge=current.response, decoded=decoded, case_id=case)
        outcome = _in_progress(current)
        return IntakeOutcome(
            IN_PROGRESS,
            retry_after=outcome.retry_after,
            case_id=case,
            decoded=decoded,
            detail="This attempt lost its claim to a newer one; nothing was recorded by it.",
        )
    retryable = branch == RETRYABLE
    kind = CANCELLED if retryable else REJECTED
    # The claim is released in the case's own transaction: if the case cannot be
    # written, the claim stays PENDING in the stuck-claim index and the sweep opens it.
    case = cancelled_case(
        409 if retryable else 500,
        kind,
        lambda case_id: repos.claims.finalise_item(
            claim,
            status=FAILED,
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


def _token_mismatch(repos: Repositories, claim: Claim, exc: ClientError) -> IntakeOutcome:
    return _case_for_pending_claim(
        repos,
        claim,
        exc,
        TOKEN_MISMATCH,
        TOKEN_PARAMETER_MISMATCH,
        422,
        "DynamoDB saw a different transaction under this request's token within its "
        "10-minute window; nothing was recorded by this request. Staff will reconcile it.",
    )


def _ambiguous(repos: Repositories, claim: Claim, exc: BaseException) -> IntakeOutcome:
    """The transaction may or may not have committed. Never mint a new token: record the
    doubt as a case and let the durable record answer later."""
    logger.warning(
        "commit outcome unknown claim_version=%s error=%s", claim.version, error_code(exc)
    )
    return _case_for_pending_claim(
        repos,
        claim,
        exc,
        AMBIGUOUS_TIMEOUT,
        OUTCOME_UNKNOWN,
        202,
        "The acknowledgement was lost: the pledge may or may not be recorded. "
        "GET this pledge to learn the outcome; do not resend with a new key.",
    )


def _case_for_pending_claim(
    repos: Repositories,
    claim: Claim,
    exc: BaseException,
    case_type: str,
    kind: str,
    http_status: int,
    detail: str,
) -> IntakeOutcome:
    """Open a case for a claim left PENDING by an unclear commit, and hand the claim to
    the case (out of the stuck-claim index) in the same transaction."""
    case = _open_case(
        repos,
        claim,
        case_type,
        decoded=[],
        error=exc,
        client_outcome={"http_status": http_status, "error": kind},
        claim_move=lambda case_id: repos.claims.attach_item(
            claim, case_id=case_id, error_code=case_type
        ),
    )
    return IntakeOutcome(kind, case_id=case, detail=detail)


def _open_case(
    repos: Repositories,
    claim: Claim,
    case_type: str,
    *,
    decoded: list[DecodedReason],
    error: BaseException,
    client_outcome: dict,
    claim_move: Callable[[str], dict] | None = None,
) -> str | None:
    """Open the case for this claim version, with the claim's move (``claim_move``,
    given the case id) in the same transaction. If it cannot be written the claim stays
    PENDING in the stuck-claim index, where the sweep will find it: nothing is lost."""
    case = case_build(
        case_type=case_type,
        claim=claim,
        evidence={"error_code": error_code(error), "error_message": str(error)[:500]},
        decoded=[r.as_dict() for r in decoded],
        client_outcome=client_outcome,
        opened_by=pledge_receipt_actor(claim),
        now=clock.now(),
    )
    claim_item = claim_move(case.case_id) if claim_move else None
    try:
        stored, created = case_open(
            repos, case=case, actor=_system_for(claim), claim_item=claim_item
        )
    except (BotoCoreError, ClientError, RetriesExhausted) as exc:
        logger.error("could not open %s case: %s", case_type, error_code(exc))
        return None
    if not created and claim_item is not None and stored.state != RESOLVED:
        # The case already existed, open (an earlier attempt of this very opening, or the
        # sweep's on the same question): the claim may now follow it on its own. A
        # resolved case follows nothing: the claim stays where the sweep can find it.
        _apply_quietly(repos, claim_item)
    return stored.case_id


def _apply_quietly(repos: Repositories, claim_item: dict) -> None:
    try:
        repos.client.update_item(**claim_item["Update"])
    except (BotoCoreError, ClientError) as exc:
        # A failed fence means the claim moved on (committed, or a successor holds it).
        logger.info("claim not moved to its case: %s", error_code(exc))


def _system_for(claim: Claim) -> Actor:
    return Actor(
        username="system",
        role=Role.SYSTEM,
        address=claim.client_address,
        correlation_id=claim.correlation_id,
    )


def _finalise_quietly(
    repos: Repositories,
    claim: Claim,
    *,
    status: str,
    error: str | None = None,
    response: dict | None = None,
    payload_hash: str | None = None,
    case_id: str | None = None,
    expires_in_s: int | None = None,
) -> None:
    """Fenced transition after a definitive outcome; the claim expires after
    ``expires_in_s`` (default: the FAILED cool-off). If it fails the claim stays PENDING
    and the sweep takes over; the caller's answer does not depend on it."""
    try:
        repos.claims.finalise(
            claim,
            status=status,
            response_body=response,
            error_code=error,
            expires_in_s=settings.CLAIM_FAILED_TTL_S if expires_in_s is None else expires_in_s,
            payload_hash=payload_hash,
            case_id=case_id,
        )
    except ClaimTaken:
        pass
    except (BotoCoreError, ClientError) as exc:
        logger.warning("could not finalise claim: %s", error_code(exc))


class StoreUnavailable(Exception):
    """DynamoDB could not be read; the answer is unknown, not 'absent'."""


def pledge_get(*, tenant: str, idempotency_key: str) -> dict | None:
    """The durable record, read consistently: the recovery path after a 202. Raises
    :class:`StoreUnavailable` rather than answering 'not found' when DynamoDB is down."""
    intent_id = intent_id_for(tenant, idempotency_key)
    pk = claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key)
    try:
        repos = repositories_for_key(pk)
        pledge = with_retry(lambda: repos.pledges.get(intent_id, consistent=True))
    except (BotoCoreError, ClientError, RetriesExhausted) as exc:
        raise StoreUnavailable(error_code(exc)) from exc
    return pledge.api_body() if pledge else None


__all__ = ["PENDING", "pledge_commit", "pledge_get", "pledge_submit"]
