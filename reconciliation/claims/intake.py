"""The exactly-once pledge write path (docs/design.md §4).

1. **Claim**: a conditional PutItem creates a PENDING claim; a duplicate learns the
   existing claim from ALL_OLD in the same round trip. FAILED or expired PENDING claims
   are re-claimed with a version-fenced UpdateItem that keeps the stored token.
2. **Commit**: one ``TransactWriteItems`` with the claim's ``ClientRequestToken``: the
   pledge Put (``attribute_not_exists``), the ledger Update, the audit receipt Put, the
   claim's PENDING→COMPLETED Update fenced on its version and, last, the intake request
   log's entry of the answer it gives (``created``), so a new pledge's log costs no round
   trip of its own.

Every unclean outcome opens a reconciliation case; a commit that did not succeed is
answered in :mod:`reconciliation.claims.commit_outcomes`. Outcomes are returned as
:class:`IntakeOutcome` (:mod:`reconciliation.claims.outcomes`); the view maps
them to HTTP.
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from reconciliation import clock, metrics
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.repository import GENESIS_HASH, AuditRepository, audit_event_build
from reconciliation.claims.ack_wakeup import ack_wake
from reconciliation.claims.commit_outcomes import commit_failed, pledge_receipt_actor
from reconciliation.claims.ledger import LedgerRepository, ledger_key_for
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    Claim,
    ClaimBody,
    ClaimKey,
    ClaimStatus,
    Pledge,
    PledgeStatus,
    claim_pk,
    intent_id_for,
)
from reconciliation.claims.outcomes import (
    IntakeOutcome,
    OutcomeKind,
    in_progress_outcome,
    throttled_outcome,
    unavailable_outcome,
)
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository, ClaimTaken
from reconciliation.claims.request import PledgeRequest
from reconciliation.claims.request_log import RequestLogRepository, intake_request_of_commit
from reconciliation.claims.versions import VERSIONS, PledgeVersion
from reconciliation.dynamo import attempts
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.items import transact_items
from reconciliation.dynamo.retry import RetriesExhausted, with_retry
from reconciliation.dynamo.tables import ack_shard
from reconciliation.stores import Store, pledge_stream

RECEIPT_NAMESPACE = uuid.UUID("6f1c1d5e-8f4a-4f61-9a53-2d0f4b1e7a10")


@dataclass(frozen=True)
class ClaimTerms:
    """How a submission's claim is taken: held for ``lease_s`` seconds (``None``:
    ``CLAIM_PENDING_TTL_S``), a new claim hashed by ``version``'s rules and storing its
    name (``None``: the current version)."""

    lease_s: int | None = None
    version: PledgeVersion | None = None


def pledge_submit(
    store: Store,
    *,
    tenant: str,
    idempotency_key: str,
    request: PledgeRequest,
    actor: Actor,
    terms: ClaimTerms | None = None,
) -> IntakeOutcome:
    """Record ``request`` exactly once for ``(tenant, idempotency_key)``, its claim taken
    on ``terms`` (default: the lease and version of the settings). ``store``: the key's
    home region (``pledge_home``), resolved by the caller, on a client of its own where
    it injects faults (the drill, the simulator)."""
    started = time.monotonic()
    pk = claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key)
    terms = terms or ClaimTerms()
    version = terms.version or VERSIONS.current
    try:
        asked = _Submission(pk, tenant, idempotency_key, request, actor, terms.lease_s, version)
        outcome = _claim(store, asked)
        if isinstance(outcome, IntakeOutcome):
            return _count(outcome)
        claim, fresh = outcome
        if store.faults is not None:
            # The worker may die here, between claim and commit: the sweep finds the claim.
            store.faults.crash_after_claim()
        return _count(pledge_commit(store, claim, fresh=fresh))
    except (BotoCoreError, RetriesExhausted) as exc:
        # A read after a definitive outcome failed (every write outcome that may have
        # committed is handled inside pledge_commit): the claim stays as it is, the
        # client retries later.
        return _count(unavailable_outcome(exc))
    except ClientError as exc:
        # A read or claim write refused outright (AccessDenied, Validation…): nothing of
        # this request was committed (the commit answers for itself), so a definite 503.
        return _count(unavailable_outcome(exc))
    finally:
        metrics.COMMIT_SECONDS.observe(time.monotonic() - started)


def _count(outcome: IntakeOutcome) -> IntakeOutcome:
    metrics.PLEDGE_OUTCOMES.labels(outcome.kind).inc()
    return outcome


@dataclass(frozen=True)
class _Submission:
    """One request to record a pledge, as :func:`pledge_submit` was given it."""

    pk: str
    tenant: str
    idempotency_key: str
    request: PledgeRequest
    actor: Actor
    lease_s: int | None
    version: PledgeVersion


def _claim(store: Store, asked: _Submission) -> tuple[Claim, bool] | IntakeOutcome:
    """Acquire the claim, or answer without one (replay, reuse, in progress)."""
    version, request = asked.version, asked.request
    mine = ClaimRepository(store).new_claim(
        key=ClaimKey.of_pledge(asked.tenant, asked.idempotency_key),
        body=ClaimBody(
            payload_hash=version.payload_hash(request),
            request=version.normalise(request),
            pledge_version=version.name,
        ),
        correlation_id=asked.actor.correlation_id,
        client_address=asked.actor.address,
        lease_s=asked.lease_s,
    )

    def take(existing: Claim | None) -> tuple[Claim, bool]:
        if existing is None:
            # First claim, or the item vanished (TTL) since: the durable pledge record
            # still decides at commit.
            return ClaimRepository(store).create(mine), True
        return ClaimRepository(store).reclaim(existing, attempt=mine), False

    existing: Claim | None = None
    for _ in range(4):
        if existing is not None:
            if existing.attempt_id == mine.attempt_id:
                # The SDK sent our own PutItem or re-claim again after a lost response:
                # the claim is ours (a re-claim carries this request's attempt id too).
                metrics.CLAIMS.labels("own_retry").inc()
                return existing, existing.version == 1
            verdict = _judge_existing(store, existing, request)
            if verdict is not None:
                return verdict
        try:
            claim, fresh = with_retry(functools.partial(take, existing))
        except ClaimTaken as taken:
            existing = taken.current  # someone else holds or changed it: judge again
            continue
        except RetriesExhausted as exc:
            return throttled_outcome(exc)
        except (BotoCoreError, ClientError) as exc:
            return unavailable_outcome(exc)
        metrics.CLAIMS.labels("created" if fresh else "reclaimed").inc()
        return claim, fresh
    return in_progress_outcome(existing)


def _judge_existing(store: Store, existing: Claim, request: PledgeRequest) -> IntakeOutcome | None:
    """Answer from an existing claim, or ``None`` when it may be re-claimed. The body is
    hashed by the rules of the version the claim was stored under, whatever version this
    request names: a later change of a rule never makes an identical replay a reuse."""
    if not VERSIONS.stored(existing.pledge_version).hash_matches(request, existing.payload_hash):
        metrics.CLAIMS.labels("key_reused").inc()
        return IntakeOutcome(
            OutcomeKind.KEY_REUSED,
            detail="This Idempotency-Key was used with a different request body.",
        )
    now = clock.epoch()
    if existing.status == ClaimStatus.COMPLETED:
        metrics.CLAIMS.labels("replay").inc()
        if not existing.expired(now) and existing.response:
            return IntakeOutcome(OutcomeKind.REPLAYED, pledge=existing.response)
        # Past its expiry the cached answer is not trusted: the durable record is.
        pledge = with_retry(lambda: PledgeRepository(store).get(existing.intent_id))
        if pledge is not None:
            return IntakeOutcome(OutcomeKind.REPLAYED, pledge=pledge.api_body())
        return None
    if not existing.expired(now):
        metrics.CLAIMS.labels("in_progress").inc()
        return in_progress_outcome(existing)
    return None


def pledge_for_claim(claim: Claim, region_tag: str = "") -> tuple[Pledge, dict[str, Any]]:
    """The pledge and its receipt event for ``claim`` written in the region tagged
    ``region_tag``, whose ledger shard and pledge stream name it. A pure function of the
    claim and its region, so every retry of one commit sends a byte-identical
    transaction under its token."""
    request = claim.request
    ledger_key = ledger_key_for(request["fund"], request["currency"], claim.intent_id, region_tag)
    pledge = Pledge(
        intent_id=claim.intent_id,
        tenant=claim.tenant,
        donor_ref=request["donor_ref"],
        fund=request["fund"],
        amount=PledgeRequest.from_normalised(request).amount,
        currency=request["currency"],
        status=PledgeStatus.RECORDED,
        request_token=claim.request_token,
        created_at=claim.claimed_at,
        ledger_key=ledger_key,
        # The claim's own (none on a claim stored before versions: the pledge then has
        # none either, so a commit retried across an upgrade sends the same transaction
        # under its token; both read as the first version).
        pledge_version=claim.pledge_version,
    )
    receipt = audit_event_build(
        AuditEvent(
            action=AuditAction.PLEDGE_RECORDED,
            actor=pledge_receipt_actor(claim),
            at=claim.claimed,
            event_id=str(uuid.uuid5(RECEIPT_NAMESPACE, f"{claim.request_token}:{claim.version}")),
            intent_id=claim.intent_id,
            after=pledge.snapshot(),
        ),
        stream=pledge_stream(claim.intent_id, region_tag),
        seq=1,
        prev_hash=GENESIS_HASH,
    )
    pledge = Pledge(**{**pledge.__dict__, "audit_seq": 1, "audit_head": receipt["hash"]})
    return pledge, receipt


def commit_items(store: Store, claim: Claim) -> tuple[list[dict[str, Any]], Pledge]:
    """The commit's transaction items, in the order its cancellation reasons are decoded:
    pledge, ledger, receipt, claim, request log entry (the last, so the others keep the
    positions they have always had). Every one is built from the claim and its region."""
    pledge, receipt = pledge_for_claim(claim, store.tag)
    items = [
        PledgeRepository(store).put_item(pledge),
        LedgerRepository(store).add_item(
            pledge.ledger_key,
            fund=pledge.fund,
            currency=pledge.currency,
            amount=pledge.amount,
            count=1,
        ),
        AuditRepository(store).put_item(receipt),
        ClaimRepository(store).complete_item(claim, pledge.api_body()),
        RequestLogRepository(store).put_item(intake_request_of_commit(claim)),
    ]
    return items, pledge


def pledge_commit(store: Store, claim: Claim, *, fresh: bool = False) -> IntakeOutcome:
    """Run the commit transaction for a claim this caller holds.

    The outcome rule (docs/design.md §4): once any attempt may have applied — a timeout after
    the request was sent, a lost response, a 5xx, including the SDK's own attempts that
    the final error hides — the answer is success or 202, never a definite failure,
    whatever the later attempts said."""
    items, pledge = commit_items(store, claim)

    def transact() -> None:
        store.client.transact_write_items(
            TransactItems=transact_items(items), ClientRequestToken=claim.request_token
        )

    with attempts.watch() as log:
        try:
            with_retry(transact)
        except (BotoCoreError, ClientError, RetriesExhausted) as exc:
            failure: BotoCoreError | ClientError | RetriesExhausted = exc
        else:
            # The dispatchers hear of it now rather than at their next poll (best effort).
            ack_wake(ack_shard(pledge.intent_id))
            return IntakeOutcome(OutcomeKind.CREATED, pledge=pledge.api_body())
    return commit_failed(store, claim, items, failure, fresh=fresh, maybe=log.maybe_applied)


class StoreUnavailable(Exception):
    """DynamoDB could not be read; the answer is unknown, not 'absent'."""


def pledge_get(store: Store, *, tenant: str, idempotency_key: str) -> dict[str, Any] | None:
    """The durable record, read consistently: the recovery path after a 202. Raises
    :class:`StoreUnavailable` rather than answering 'not found' when DynamoDB is down."""
    intent_id = intent_id_for(tenant, idempotency_key)
    try:
        pledge = with_retry(lambda: PledgeRepository(store).get(intent_id, consistent=True))
    except (BotoCoreError, ClientError, RetriesExhausted) as exc:
        raise StoreUnavailable(error_code(exc)) from exc
    return pledge.api_body() if pledge else None


def pledge_key_known(store: Store, *, tenant: str, idempotency_key: str) -> bool:
    """Whether this key was ever claimed or recorded, read consistently. A request for a
    known key is answered from what exists (replay, key reused, in progress, a retry of
    an unclear commit), never refused by a rule that came later, such as a fund removed
    or its limit lowered since: a client retrying after a 202 must get the original
    answer. When DynamoDB cannot be read the key counts as known, so the write path
    answers (503), not a refusal that may be false."""
    pk = claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key)
    intent_id = intent_id_for(tenant, idempotency_key)
    try:
        if with_retry(lambda: ClaimRepository(store).get(pk)) is not None:
            return True
        # A claim removed by TTL: the durable record still answers for the key.
        return (
            with_retry(lambda: PledgeRepository(store).get(intent_id, consistent=True)) is not None
        )
    except (BotoCoreError, ClientError, RetriesExhausted):
        return True


__all__ = [
    "StoreUnavailable",
    "commit_items",
    "pledge_commit",
    "pledge_for_claim",
    "pledge_get",
    "pledge_key_known",
    "pledge_submit",
]
