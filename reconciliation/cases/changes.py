"""Case services. Every case change is one ``TransactWriteItems``: the case write
(conditioned on the version seen, or on absence when opening), its audit event, and the
queue counters — no change without its event, no event without its change."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from reconciliation import clock, metrics
from reconciliation.audit.repository import AuditRepository, audit_event_build
from reconciliation.cases.counters import CounterMove, counter_moves, counter_shard
from reconciliation.cases.models import Case
from reconciliation.cases.repository import CaseRepository, case_indexed
from reconciliation.cases.transitions import CaseEvent
from reconciliation.cases.vocabulary import CaseState
from reconciliation.dynamo.cancellation import CancellationCode, cancellation_decode
from reconciliation.dynamo.errors import cancellation_codes
from reconciliation.dynamo.items import transact_items
from reconciliation.dynamo.retry import with_retry
from reconciliation.stores import Store

logger = logging.getLogger(__name__)


class CaseWrite:
    """One case transaction, retried on transient errors, with the queue counter moves
    appended. Each attempt moves the counters on the next shard, so a counter item made
    hot by a burst of case changes cannot keep a case from opening or changing."""

    def __init__(self, store: Store, case_id: str, counter_moves: Sequence[CounterMove]):
        self.store = store
        self.counter_moves = counter_moves
        self.shards = itertools.count(counter_shard(case_id))
        self.sent: list[dict[str, Any]] = []  # the last attempt's items, to decode a cancellation

    def send(self, items: list[dict[str, Any]]) -> None:
        with_retry(lambda: self._attempt(items))

    def _attempt(self, items: list[dict[str, Any]]) -> None:
        shard = next(self.shards)
        self.sent = items + [
            CaseRepository(self.store).counter_item(move, shard=shard)
            for move in self.counter_moves
        ]
        self.store.client.transact_write_items(TransactItems=transact_items(self.sent))


# --- changing a case -------------------------------------------------------------------


class CaseError(Exception):
    """A case action was refused; the message says why in words a user can act on, and
    ``code`` names the kind of refusal (the web edge maps it to a status)."""

    code = "refused"


class CaseNotFound(CaseError):
    code = "not_found"


class NotAllowed(CaseError):
    code = "not_allowed"


class InvalidReason(CaseError):
    code = "invalid_reason"


class CaseChanged(CaseError):
    """Someone else changed the case since it was read: who, when, and the fresh case."""

    code = "case_changed"

    def __init__(self, current: Case):
        super().__init__(
            f"Case {current.case_id} was changed by {current.last_actor} at "
            f"{clock.plain(current.last_action_at)} (now "
            f"{CaseState.words(current.state).lower()}, version {current.version})."
        )
        self.current = current


@dataclass(frozen=True)
class CaseLoad:
    """A case read for an action (:func:`case_load`)."""

    case: Case
    done: bool  # the action's id was already applied to it (a double submission)


def case_load(
    store: Store, case_id: str, *, seen_version: int | None, action_id: str | None
) -> CaseLoad:
    """The case as stored, and whether ``action_id`` was already applied to it.

    A stale ``seen_version`` raises :class:`CaseChanged` unless this very action is what
    changed it (a double submission), which is reported as already applied."""
    case = CaseRepository(store).get(case_id)
    if case is None:
        raise CaseNotFound(f"No case {case_id}.")
    if action_id and case.last_action_id == action_id:
        return CaseLoad(case, True)
    if seen_version is not None and case.version != seen_version:
        raise CaseChanged(case)
    return CaseLoad(case, False)


def _case_write_cancelled(
    store: Store,
    case: Case,
    write: CaseWrite,
    exc: ClientError,
    codes: list[str],
    event: CaseEvent,
) -> Case:
    """After a cancelled case transaction: the case as stored if ``event``'s very action
    changed it (a double submission). Otherwise raise :class:`CaseChanged` if the case
    write or its event lost the race, else :class:`CaseError` with the decoded reasons."""
    action, actor, action_id = event.action, event.grounds.actor, event.grounds.action_id
    if codes[0] == CancellationCode.CONDITIONAL_CHECK_FAILED or codes[1:2] == [
        CancellationCode.CONDITIONAL_CHECK_FAILED
    ]:
        current = CaseRepository(store).get(case.case_id)
        if current is None:
            raise CaseNotFound(f"No case {case.case_id}.") from exc
        # Another hand changed the case after this one read it: this change is not
        # written. Counted, so a system actor that loses (a retry delivered twice, a sweep
        # racing a person) leaves a trace; people also get the 409 page.
        metrics.CASE_CHANGES_LOST.labels(actor.role, action).inc()
        logger.info(
            "case %s: %s by %s not written: the case is at version %s, not %s",
            case.case_id,
            action,
            actor.role,
            current.version,
            case.version,
        )
        if action_id and current.last_action_id == action_id:
            return current
        raise CaseChanged(current) from exc
    rows = cancellation_decode(write.sent, exc.response, store.roles())
    failed = [r for r in rows if r.code != CancellationCode.NONE]
    detail_text = "; ".join(f"{r.table}: {r.explanation}" for r in failed)
    raise CaseError(f"The change was not applied: {detail_text}") from exc


class AlreadyResolved(CaseError):
    """The case carries a resolution and the change would replace it."""

    code = "already_resolved"


def _resolution_stands(read: Case, updated: Case) -> None:
    """A resolution stands (docs/design.md §6): a change that would write a resolution
    over the one the case carries is refused; only a reopen, which clears it first, lets
    a case be resolved again."""
    new, last = updated.resolution, read.resolution
    if new and last and new != last:
        raise AlreadyResolved(
            f"Case {read.case_id} is already resolved ({last.disposition} by "
            f"{last.by} at {clock.plain(last.at)}); a resolution is only "
            "changed by an approved reopen."
        )


def case_commit_change(store: Store, read: Case, updated: Case, event: CaseEvent) -> Case:
    """Write ``updated``, the next record of the case ``read`` (a transition's, in
    :mod:`reconciliation.cases.transitions`), in one transaction with ``event`` placed
    in the case's audit stream and what rides on it (``event.writes``,
    ``event.events``): they commit or fail together.

    The case write is conditioned on the version read, so of two people acting at once
    exactly one commits; the loser gets :class:`CaseChanged` naming the winner. A change
    that would write a resolution over the one ``read`` carries is refused here, before
    anything is sent."""
    if updated.case_id != read.case_id or updated.version != read.version + 1:
        raise ValueError("a case change writes the next version of the case it read")
    _resolution_stands(read, updated)
    updated = case_indexed(updated)
    placed = audit_event_build(
        event.audit(read, updated),
        stream=f"CASE#{read.case_id}",
        seq=read.audit_seq + 1,
        prev_hash=read.audit_head,
    )
    updated = replace(updated, audit_seq=placed["seq"], audit_head=placed["hash"])
    audit = AuditRepository(store)
    items = [
        CaseRepository(store).replace_item(updated, seen_version=read.version),
        audit.put_item(placed),
        *event.writes,
        *(audit.put_item(e) for e in event.events),
    ]
    write = CaseWrite(store, read.case_id, counter_moves(read, read.queue, updated.queue))
    action, actor = event.action, event.grounds.actor
    try:
        write.send(items)
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if not codes:
            raise
        return _case_write_cancelled(store, read, write, exc, codes, event)
    logger.info("case %s: %s by %s", read.case_id, action, actor.role)
    return updated
