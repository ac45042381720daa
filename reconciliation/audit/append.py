"""Appending to an audit stream by its head (docs/design.md §7)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, NoReturn

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt

from reconciliation.audit.models import AuditEvent
from reconciliation.audit.repository import GENESIS_HASH, AuditRepository, audit_event_build
from reconciliation.dynamo.retry import full_jitter
from reconciliation.stores import Store


class AuditAppendContended(Exception):
    """Every attempt to append to a stream lost the race for the next ``seq``."""


def audit_append(
    store: Store,
    *,
    stream: str,
    build: Callable[[int, str], dict[str, Any] | None],
    attempts: int = 8,
) -> dict[str, Any] | None:
    """Append the event ``build(seq, prev_hash)`` after the stream's current head.

    The head is read (Query, newest first, Limit 1) and the event put with
    ``attribute_not_exists``; a writer that lost the race for that ``seq`` reads the new
    head and builds again, so ``build`` may decide there is nothing left to do (None).
    """
    audit = AuditRepository(store)

    def attempt() -> tuple[bool, dict[str, Any] | None]:
        head = audit.head(stream)
        seq, prev = (head.seq + 1, head.hash) if head else (1, GENESIS_HASH)
        event = build(seq, prev)
        if event is None:
            return True, None
        return audit.append(event), event

    def contended(state: RetryCallState) -> NoReturn:
        raise AuditAppendContended(f"{stream}: lost the race for the next seq {attempts} times")

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=full_jitter(0.02, 0.5, random.Random()),
        retry=retry_if_result(lambda done: not done[0]),
        retry_error_callback=contended,
    )
    return retrying(attempt)[1]


def audit_event_append(store: Store, *, stream: str, event: AuditEvent) -> dict[str, Any]:
    """Append ``event`` to ``stream``, whatever the head is; returns the item as stored.
    For streams about a subject with no state of its own to re-check (an account, a
    tenant)."""

    def build(seq: int, prev: str) -> dict[str, Any]:
        return audit_event_build(event, stream=stream, seq=seq, prev_hash=prev)

    placed = audit_append(store, stream=stream, build=build)
    assert placed is not None  # build never declines
    return placed
