"""Synthetic, correctly chained audit events for tests and benchmarks.

The events are built with :func:`audit_event_build`, so every hash and link is real;
streams look like the live ones (``PLEDGE#…`` receipts, ``CASE#…`` histories) and are
spread over a range of days. Load them with :meth:`AuditRepository.batch_put`.

Not production code: ``bench/export.py`` imports it as ``audit_synthetic`` (the bench
directory is its script's path), tests as ``bench.audit_synthetic``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta

from reconciliation.actors import Actor, Role
from reconciliation.audit.models import AuditEvent
from reconciliation.audit.repository import GENESIS_HASH, audit_event_build

STAFF = (
    Actor("ada", Role.FINANCE_STAFF, "ada@example.org", "10.0.0.11"),
    Actor("ben", Role.FINANCE_STAFF, "ben@example.org", "10.0.0.12"),
    Actor("sam", Role.SUPERVISOR, "sam@example.org", "10.0.0.21"),
)
CASE_ACTIONS = ("case_escalated", "disposition_recorded", "override_requested", "case_resolved")


def synthetic_events(
    total: int,
    *,
    start: datetime,
    days: int = 1,
    seed: int = 7,
    tag: str = "",
) -> Iterator[dict]:
    """Exactly ``total`` events in whole streams (the last stream may be cut short),
    with ``at`` spread uniformly over ``days`` days from ``start``."""
    rng = random.Random(seed)
    span = days * 86400
    made = 0
    n = 0
    while made < total:
        n += 1
        pledge = rng.random() < 0.6
        length = min(rng.choice((1, 1, 2)) if pledge else rng.randint(2, 6), total - made)
        at = start + timedelta(seconds=rng.uniform(0, span - 3600))
        prev = GENESIS_HASH
        intent = f"acme#{tag}k{n}"
        case_id = f"{tag}c{n:08d}"
        stream = f"PLEDGE#{intent}" if pledge else f"CASE#{case_id}"
        correlation = str(uuid.UUID(int=rng.getrandbits(128)))
        for seq in range(1, length + 1):
            if pledge:
                action = "pledge_recorded" if seq == 1 else "pledge_voided"
                actor = Actor("api:acme", Role.API, "", "192.0.2.1", correlation)
                extra: dict = {"intent_id": intent, "after": {"amount": "25.00", "fund": "GENERAL"}}
            else:
                action = "case_opened" if seq == 1 else rng.choice(CASE_ACTIONS)
                actor = replace(rng.choice(STAFF), correlation_id=correlation)
                extra = {
                    "case_id": case_id,
                    "intent_id": intent,
                    "reason_code": "EVIDENCE_REVIEWED",
                    "reason_text": "checked the ledger and the pledge record",
                }
            event = audit_event_build(
                AuditEvent(action=action, actor=actor, at=at, **extra),
                stream=stream,
                seq=seq,
                prev_hash=prev,
            )
            prev = event["hash"]
            made += 1
            yield event
            at += timedelta(seconds=rng.uniform(1, 600))
