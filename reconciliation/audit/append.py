"""Appending to an audit stream by its head (DESIGN.md §7)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from reconciliation.audit.repository import GENESIS_HASH, AuditRepository
from reconciliation.dynamo.retry import full_jitter_delay
from reconciliation.stores import Store


class AuditAppendContended(Exception):
    """Every attempt to append to a stream lost the race for the next ``seq``."""


def audit_append(
    store: Store,
    *,
    stream: str,
    build: Callable[[int, str], dict | None],
    attempts: int = 8,
) -> dict | None:
    """Append the event ``build(seq, prev_hash)`` after the stream's current head.

    The head is read (Query, newest first, Limit 1) and the event put with
    ``attribute_not_exists``; a writer that lost the race for that ``seq`` reads the new
    head and builds again, so ``build`` may decide there is nothing left to do (None).
    """
    rng = random.Random()
    for attempt in range(attempts):
        head = AuditRepository(store).head(stream)
        seq, prev = (head.seq + 1, head.hash) if head else (1, GENESIS_HASH)
        event = build(seq, prev)
        if event is None:
            return None
        if AuditRepository(store).append(event):
            return event
        time.sleep(full_jitter_delay(attempt, 0.02, 0.5, rng))
    raise AuditAppendContended(f"{stream}: lost the race for the next seq {attempts} times")
