"""Case services. Every case change is one ``TransactWriteItems``: the case write
(conditioned on the version seen, or on absence when opening), its audit event, and the
queue counters — no change without its event, no event without its change."""

from __future__ import annotations

import logging
from decimal import Decimal

from botocore.exceptions import ClientError

from reconciliation import clock, metrics
from reconciliation.actors import Actor
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.retry import with_retry
from reconciliation.repositories import Repositories
from reconciliation.repositories.audit import GENESIS_HASH, audit_event_build
from reconciliation.repositories.cases import (
    OPEN,
    Case,
    case_id_for,
    queue_for,
)
from reconciliation.repositories.claims import Claim

logger = logging.getLogger(__name__)


def case_build(
    *,
    case_type: str,
    claim: Claim,
    evidence: dict,
    decoded: list[dict] | None = None,
    client_outcome: dict | None = None,
    opened_by: Actor,
) -> Case:
    """A new OPEN case for ``claim`` at the version it was seen, not yet written."""
    now = clock.now()
    case_id = case_id_for(claim.pk, claim.version)
    request = claim.request or {}
    opened_at = clock.iso(now)
    queue = queue_for(case_type, OPEN)
    return Case(
        case_id=case_id,
        case_type=case_type,
        state=OPEN,
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
        queue=queue,
        queue_sort=f"{opened_at}#{case_id}",
        decoded=decoded or [],
        evidence=evidence,
        client_outcome=client_outcome or {},
        last_actor=opened_by.username,
        last_action_at=opened_at,
    )


def case_open(repos: Repositories, *, case: Case, actor: Actor) -> tuple[Case, bool]:
    """Write a new case with its ``case_opened`` event and counter, once.

    Returns the case and whether this call created it; opening an existing case id is a
    no-op that returns the stored case.
    """
    event = audit_event_build(
        stream=f"CASE#{case.case_id}",
        seq=1,
        prev_hash=GENESIS_HASH,
        action="case_opened",
        actor=actor,
        at=clock.parse_iso(case.opened_at),
        case_id=case.case_id,
        intent_id=case.intent_id,
        after={"state": case.state, "case_type": case.case_type, "queue": case.queue},
        detail={"client_outcome": case.client_outcome, "evidence": _audit_safe(case.evidence)},
    )
    stored = Case(**{**case.__dict__, "audit_seq": 1, "audit_head": event["hash"]})
    items = [
        repos.cases.put_new_item(stored),
        repos.audit.put_item(event),
        repos.cases.counter_item(stored.queue, +1),
    ]
    try:
        with_retry(lambda: repos.client.transact_write_items(TransactItems=items))
    except ClientError as exc:
        reasons = exc.response.get("CancellationReasons") or []
        if (
            error_code(exc) == "TransactionCanceledException"
            and reasons
            and reasons[0].get("Code") == "ConditionalCheckFailed"
        ):
            existing = repos.cases.get(case.case_id)
            if existing is not None:
                return existing, False
        raise
    metrics.CASES_OPENED.labels(case.case_type).inc()
    logger.info("case opened case_id=%s type=%s", case.case_id, case.case_type)
    return stored, True


def _audit_safe(evidence: dict) -> dict:
    """Evidence as recorded in the audit event: the summary, not cached response bodies."""
    out = dict(evidence)
    claim = out.get("claim")
    if isinstance(claim, dict):
        out["claim"] = {k: v for k, v in claim.items() if k not in ("response", "request")}
    return out
