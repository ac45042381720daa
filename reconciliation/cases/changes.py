"""Case services. Every case change is one ``TransactWriteItems``: the case write
(conditioned on the version seen, or on absence when opening), its audit event, and the
queue counters — no change without its event, no event without its change."""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from botocore.exceptions import ClientError

from reconciliation import clock, metrics
from reconciliation.actors import Actor
from reconciliation.audit.repository import GENESIS_HASH, audit_event_build
from reconciliation.cases.repository import (
    OPEN,
    Case,
    case_id_for,
    counter_shard,
    queue_for,
)
from reconciliation.claims.repository import Claim
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.items import transact_items
from reconciliation.dynamo.retry import with_retry
from reconciliation.stores import Repositories

logger = logging.getLogger(__name__)


def case_build(
    *,
    case_type: str,
    claim: Claim,
    evidence: dict,
    decoded: list[dict] | None = None,
    client_outcome: dict | None = None,
    opened_by: Actor,
    now: datetime,
) -> Case:
    """A new OPEN case for ``claim`` at the version it was seen, opened at ``now``, not
    yet written. Its evidence is the claim and its token as they were at ``now``, plus
    what the caller adds (``evidence``)."""
    case_id = case_id_for(claim.pk, claim.version, case_type)
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
        evidence={**claim.token_evidence(now), **evidence},
        client_outcome=client_outcome or {},
        last_actor=opened_by.username,
        last_action_at=opened_at,
        request=dict(request),
    )


def case_open(
    repos: Repositories, *, case: Case, actor: Actor, claim_item: dict | None = None
) -> tuple[Case, bool]:
    """Write a new case with its ``case_opened`` event and counter, once.

    ``claim_item`` is the claim's move out of the stuck-claim index (attach, or a fenced
    finalisation), written in the same transaction: a claim leaves the index only with
    its case, never alone (DESIGN.md §3). If the claim moved on meanwhile (its fence
    fails), the case is opened without it. Returns the case and whether this call
    created it; opening an existing case id is a no-op that returns the stored case and
    leaves the claim to the caller.
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
    items = [repos.cases.put_new_item(stored), repos.audit.put_item(event)]
    if claim_item is not None:
        items.append(claim_item)
    try:
        # A new case is OPEN, so it has a queue; count it only where it is listed.
        moves = [(stored.queue, +1)] if stored.queue else []
        _CaseWrite(repos, stored.case_id, moves).send(items)
    except ClientError as exc:
        codes = _cancellation_codes(exc)
        if codes and codes[0] == "ConditionalCheckFailed":
            existing = repos.cases.get(case.case_id)
            if existing is not None:
                return existing, False
        if claim_item is not None and len(codes) > 2 and codes[2] == "ConditionalCheckFailed":
            # The claim moved on (committed, or a successor holds it): the problem this
            # case records still happened, so open it without touching the claim.
            return case_open(repos, case=case, actor=actor)
        raise
    metrics.CASES_OPENED.labels(case.case_type).inc()
    logger.info("case opened case_id=%s type=%s", case.case_id, case.case_type)
    return stored, True


def _cancellation_codes(exc: ClientError) -> list[str]:
    if error_code(exc) != "TransactionCanceledException":
        return []
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons") or []]


class _CaseWrite:
    """One case transaction, retried on transient errors, with the queue counter moves
    appended. Each attempt moves the counters on the next shard, so a counter item made
    hot by a burst of case changes cannot keep a case from opening or changing."""

    def __init__(self, repos: Repositories, case_id: str, counter_moves: list[tuple[str, int]]):
        self.repos = repos
        self.counter_moves = counter_moves
        self.shards = itertools.count(counter_shard(case_id))
        self.sent: list[dict] = []  # the last attempt's items, to decode a cancellation

    def send(self, items: list[dict]) -> None:
        with_retry(lambda: self._attempt(items))

    def _attempt(self, items: list[dict]) -> None:
        shard = next(self.shards)
        self.sent = items + [
            self.repos.cases.counter_item(queue, delta, shard=shard)
            for queue, delta in self.counter_moves
        ]
        self.repos.client.transact_write_items(TransactItems=transact_items(self.sent))


def _audit_safe(evidence: dict) -> dict:
    """Evidence as recorded in the audit event: the summary, not cached response bodies."""
    out = dict(evidence)
    claim = out.get("claim")
    if isinstance(claim, dict):
        out["claim"] = {k: v for k, v in claim.items() if k not in ("response", "request")}
    return out


# --- changing a case -------------------------------------------------------------------


class CaseError(Exception):
    """A case action was refused; the message says why in words a user can act on."""

    code = "refused"
    status = 422


class CaseNotFound(CaseError):
    code = "not_found"
    status = 404


class NotAllowed(CaseError):
    code = "not_allowed"
    status = 403


class InvalidReason(CaseError):
    code = "invalid_reason"
    status = 400


class CaseChanged(CaseError):
    """Someone else changed the case since it was read: who, when, and the fresh case."""

    code = "case_changed"
    status = 409

    def __init__(self, current: Case):
        super().__init__(
            f"Case {current.case_id} was changed by {current.last_actor} at "
            f"{current.last_action_at} (now {current.state}, version {current.version})."
        )
        self.current = current


def case_load(
    repos: Repositories, case_id: str, *, seen_version: int | None, action_id: str | None
) -> tuple[Case, bool]:
    """The case as stored, and whether ``action_id`` was already applied to it.

    A stale ``seen_version`` raises :class:`CaseChanged` unless this very action is what
    changed it (a double submission), which is reported as already applied."""
    case = repos.cases.get(case_id)
    if case is None:
        raise CaseNotFound(f"No case {case_id}.")
    if action_id and case.last_action_id == action_id:
        return case, True
    if seen_version is not None and case.version != seen_version:
        raise CaseChanged(case)
    return case, False


def case_commit_change(
    repos: Repositories,
    case: Case,
    *,
    actor: Actor,
    action: str,
    changes: dict,
    action_id: str | None,
    disposition: str | None = None,
    reason_code: str | None = None,
    reason_text: str | None = None,
    detail: dict | None = None,
    extra_items: list[dict] | None = None,
    extra_events: list[dict] | None = None,
) -> Case:
    """Apply ``changes`` to ``case`` in one transaction with its audit event.

    The case write is conditioned on the version read, so of two people acting at once
    exactly one commits; the loser gets :class:`CaseChanged` naming the winner. Items
    in ``extra_items`` (claim, pledge, ledger writes) commit or fail with it."""
    now = clock.now()
    state = changes.get("state", case.state)
    queue = queue_for(case.case_type, state)
    updated = replace(
        case,
        **changes,
        version=case.version + 1,
        queue=queue,
        queue_sort=(case.queue_sort or f"{case.opened_at}#{case.case_id}") if queue else None,
        last_actor=actor.username,
        last_action_at=clock.iso(now),
        last_action_id=action_id,
    )
    event = audit_event_build(
        stream=f"CASE#{case.case_id}",
        seq=case.audit_seq + 1,
        prev_hash=case.audit_head,
        action=action,
        actor=actor,
        at=now,
        case_id=case.case_id,
        intent_id=case.intent_id,
        before=case.summary(),
        after=updated.summary(),
        disposition=disposition,
        reason_code=reason_code,
        reason_text=reason_text,
        detail=detail,
    )
    updated = replace(updated, audit_seq=event["seq"], audit_head=event["hash"])
    items = [
        repos.cases.replace_item(updated, seen_version=case.version),
        repos.audit.put_item(event),
        *(extra_items or []),
        *(repos.audit.put_item(e) for e in extra_events or []),
    ]
    moves = []
    if case.queue != queue:
        if case.queue:
            moves.append((case.queue, -1))
        if queue:
            moves.append((queue, +1))
    write = _CaseWrite(repos, case.case_id, moves)
    try:
        write.send(items)
    except ClientError as exc:
        codes = _cancellation_codes(exc)
        if not codes:
            raise
        if codes[0] == "ConditionalCheckFailed" or codes[1:2] == ["ConditionalCheckFailed"]:
            current = repos.cases.get(case.case_id)
            if current is None:
                raise CaseNotFound(f"No case {case.case_id}.") from exc
            if action_id and current.last_action_id == action_id:
                return current
            raise CaseChanged(current) from exc
        from reconciliation.claims.cancellation import cancellation_decode

        rows = cancellation_decode(write.sent, exc.response, repos.roles())
        failed = [r for r in rows if r.code != "None"]
        detail_text = "; ".join(f"{r.table}: {r.explanation}" for r in failed)
        raise CaseError(f"The change was not applied: {detail_text}") from exc
    logger.info("case %s: %s by %s", case.case_id, action, actor.role)
    return updated
