"""A claim whose outcome is not clean opens a case (docs/design.md §4, §6): the case is built
from the claim as it was seen, and written with its ``case_opened`` event and queue
counter — in the same transaction as the claim's move out of the stuck-claim index when
there is one, so a claim never leaves the index without its case."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation import clock, metrics
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.repository import GENESIS_HASH, AuditRepository, audit_event_build
from reconciliation.cases.changes import CaseWrite
from reconciliation.cases.counters import counter_moves
from reconciliation.cases.models import (
    DRILL_TENANT,
    Case,
    CaseRequest,
    ClientOutcome,
    Evidence,
    case_id_for,
)
from reconciliation.cases.repository import CaseRepository, case_indexed
from reconciliation.cases.vocabulary import CaseState, CaseType
from reconciliation.dynamo.cancellation import CancellationCode
from reconciliation.dynamo.errors import cancellation_codes

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from reconciliation.actors import Actor
    from reconciliation.claims.models import Claim
    from reconciliation.dynamo.cancellation import DecodedReason
    from reconciliation.stores import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaseCause:
    """Why a case opens on a claim: its type, the facts found (``evidence``, plain facts:
    :class:`Evidence` keeps what it does not name), the decoded cancellation reasons, and
    what the client was told."""

    case_type: CaseType
    evidence: dict[str, Any]
    decoded: Sequence[DecodedReason] = ()
    client_outcome: ClientOutcome | None = None


def case_build(
    *, claim: Claim, cause: CaseCause, opened_by: Actor, now: datetime, region_tag: str = ""
) -> Case:
    """A new OPEN case for ``claim`` at the version it was seen, opened at ``now`` for
    ``cause``, not yet written. Its evidence is the claim and its token as they were at
    ``now``, plus the cause's. The case lives in the claim's region, whose tag
    (``Store.tag``) its id carries."""
    case_type = cause.case_type
    case_id = case_id_for(claim.pk, claim.version, case_type, region_tag)
    request = claim.request or {}
    opened_at = clock.iso(now)
    return Case(
        case_id=case_id,
        case_type=CaseType(case_type),
        state=CaseState.OPEN,
        version=1,
        opened_at=opened_at,
        claim_pk=claim.pk,
        claim_version=claim.version,
        intent_id=claim.intent_id,
        tenant=claim.tenant,
        fund=request.get("fund", ""),
        amount=Decimal(request.get("amount", "0")),
        currency=request.get("currency", ""),
        request_token=claim.request_token,
        token_issued_at=claim.token_issued_at,
        audit_seq=0,
        audit_head=GENESIS_HASH,
        decoded=tuple(cause.decoded),
        evidence=Evidence.from_json({**claim.token_evidence(now), **cause.evidence}),
        client_outcome=cause.client_outcome or ClientOutcome(),
        last_actor=opened_by.username,
        last_action_at=opened_at,
        request=CaseRequest.from_json(request).versioned(claim.pledge_version),
        in_totals=True,
        drill_tallied=claim.tenant == DRILL_TENANT,
        donor_ref=request.get("donor_ref") or None,
    )


def case_open(
    store: Store, *, case: Case, actor: Actor, claim_item: dict[str, Any] | None = None
) -> tuple[Case, bool]:
    """Write a new case with its ``case_opened`` event and counter, once.

    ``claim_item`` is the claim's move out of the stuck-claim index (attach, or a fenced
    finalisation), written in the same transaction: a claim leaves the index only with
    its case, never alone (docs/design.md §3). If the claim moved on meanwhile (its fence
    fails), the case is opened without it. Returns the case and whether this call
    created it; opening an existing case id is a no-op that returns the stored case and
    leaves the claim to the caller.
    """
    case = case_indexed(case)  # its queue, as its event and counters name it
    event = audit_event_build(
        AuditEvent(
            action=AuditAction.CASE_OPENED,
            actor=actor,
            at=clock.parse_iso(case.opened_at),
            case_id=case.case_id,
            intent_id=case.intent_id,
            after={"state": case.state, "case_type": case.case_type, "queue": case.queue},
            detail={
                "client_outcome": case.client_outcome.to_json(),
                "evidence": audit_safe_evidence(case.evidence.to_json()),
            },
        ),
        stream=f"CASE#{case.case_id}",
        seq=1,
        prev_hash=GENESIS_HASH,
    )
    stored = Case(**{**case.__dict__, "audit_seq": 1, "audit_head": event["hash"]})
    items = [CaseRepository(store).put_new_item(stored), AuditRepository(store).put_item(event)]
    if claim_item is not None:
        items.append(claim_item)
    try:
        # A new case is OPEN, so it has a queue; count it only where it is listed.
        moves = counter_moves(stored, None, stored.queue)
        CaseWrite(store, stored.case_id, moves).send(items)
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if codes and codes[0] == CancellationCode.CONDITIONAL_CHECK_FAILED:
            existing = CaseRepository(store).get(case.case_id)
            if existing is not None:
                return existing, False
        if (
            claim_item is not None
            and len(codes) > 2
            and codes[2] == CancellationCode.CONDITIONAL_CHECK_FAILED
        ):
            # The claim moved on (committed, or a successor holds it): the problem this
            # case records still happened, so open it without touching the claim.
            return case_open(store, case=case, actor=actor)
        raise
    metrics.CASES_OPENED.labels(case.case_type).inc()
    logger.info("case opened case_id=%s type=%s", case.case_id, case.case_type)
    return stored, True


def audit_safe_evidence(evidence: dict[str, Any]) -> dict[str, Any]:
    """Evidence as recorded in the audit event: the summary, not cached response bodies."""
    out = dict(evidence)
    claim = out.get("claim")
    if isinstance(claim, dict):
        out["claim"] = {k: v for k, v in claim.items() if k not in ("response", "request")}
    return out
