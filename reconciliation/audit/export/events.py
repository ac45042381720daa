"""Export ids and the ``EXPORT#{id}`` stream: the lifecycle actions (requested,
completed, failed, abandoned, downloaded) and the one function that appends them.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from reconciliation.actors import Actor
from reconciliation.audit.append import audit_append
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.audit.repository import AuditRepository, audit_event_build
from reconciliation.stores import Store

EXPORT_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def new_export_id() -> str:
    return uuid.uuid4().hex


def export_stream(export_id: str) -> str:
    return f"EXPORT#{export_id}"


def export_event_append(
    store: Store, *, export_id: str, action: AuditAction, actor: Actor, detail: dict[str, Any]
) -> dict[str, Any] | None:
    """Append an event to ``EXPORT#{id}``; a second ``export_completed`` is refused."""
    stream = export_stream(export_id)

    def build(seq: int, prev: str) -> dict[str, Any] | None:
        if action in (AuditAction.EXPORT_COMPLETED, AuditAction.EXPORT_FAILED) and seq > 1:
            earlier = AuditRepository(store).stream_events(stream)
            if any(
                e.get("action") in (AuditAction.EXPORT_COMPLETED, AuditAction.EXPORT_FAILED)
                for e in earlier
            ):
                return None  # a redelivered task finished it already
        return audit_event_build(
            AuditEvent(action=action, actor=actor, detail=detail),
            stream=stream,
            seq=seq,
            prev_hash=prev,
        )

    return audit_append(store, stream=stream, build=build)
