"""What an unanswered pledge commit leaves behind: the reconciliation case it opens
(with the claim's move in the same transaction) and the claim's quiet, fenced moves,
for :mod:`reconciliation.claims.commit_outcomes` (docs/design.md §4)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.cases.models import RESOLVED
from reconciliation.claims.models import Claim
from reconciliation.claims.opening import case_build, case_open
from reconciliation.claims.repository import ClaimRepository, ClaimTaken
from reconciliation.dynamo.cancellation import DecodedReason
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.retry import RetriesExhausted
from reconciliation.stores import Store

logger = logging.getLogger(__name__)


def pledge_receipt_actor(claim: Claim) -> Actor:
    return Actor(
        username=f"api:{claim.tenant}",
        role=Role.API,
        address=claim.client_address,
        correlation_id=claim.correlation_id,
    )


def open_case(
    store: Store,
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
        region_tag=store.tag,
    )
    claim_item = claim_move(case.case_id) if claim_move else None
    try:
        stored, created = case_open(
            store, case=case, actor=_system_for(claim), claim_item=claim_item
        )
    except (BotoCoreError, ClientError, RetriesExhausted) as exc:
        logger.error("could not open %s case: %s", case_type, error_code(exc))
        return None
    if not created and claim_item is not None and stored.state != RESOLVED:
        # The case already existed, open (an earlier attempt of this very opening, or the
        # sweep's on the same question): the claim may now follow it on its own. A
        # resolved case follows nothing: the claim stays where the sweep can find it.
        apply_quietly(store, claim_item)
    return stored.case_id


def apply_quietly(store: Store, claim_item: dict) -> None:
    try:
        store.client.update_item(**claim_item["Update"])
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


def finalise_quietly(
    store: Store,
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
        ClaimRepository(store).finalise(
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
