"""Background exports (Celery): the request (``EXPORT#{id}`` seq 1), the run of a
requested export into ``AUDIT_EXPORT_DIR``, its status as the stream tells it, and the
download, which only the user who asked may make and which is recorded before a byte
is served.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciliation.actors import Actor, Role
from reconciliation.audit.export.delivery import export_paths, export_to_file
from reconciliation.audit.export.events import (
    EXPORT_ID_RE,
    export_event_append,
    export_stream,
    new_export_id,
)
from reconciliation.audit.export.rows import FORMATS
from reconciliation.audit.export.run import ExportAsk
from reconciliation.audit.filters import SPELLING_SEPARATOR, AuditFilters, FilterAsk
from reconciliation.audit.models import AuditAction
from reconciliation.audit.repository import AuditRepository
from reconciliation.audit.search import audit_search
from reconciliation.codes import Code
from reconciliation.stores import Store


class ExportNotFound(Exception):
    """No export has this id."""


class ExportForbidden(Exception):
    """Export files belong to the user who requested them, and to nobody else."""


class ExportNotReady(Exception):
    """The export has not finished (or failed), so there is nothing to download."""


class ExportState(Code):
    """Where a background export stands: its stream's last lifecycle action without
    ``export_``. The pages show it as it is, so members carry no label of their own."""

    REQUESTED = "requested"
    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class ExportStatus:
    export_id: str
    request: dict[str, Any]  # the stream's first event: who asked, from where, when, for what
    fmt: str
    filters: dict[str, Any]
    delivery: str
    state: ExportState
    row_count: int | None
    sha256: str
    downloads: int

    @property
    def requested_by(self) -> dict[str, Any]:
        actor: dict[str, Any] = self.request["actor"]
        return actor

    @property
    def owner(self) -> str:
        username: str = self.requested_by["username"]
        return username

    @property
    def requested_at(self) -> str:
        at: str = self.request["at"]
        return at

    @property
    def done(self) -> bool:
        return self.state == ExportState.COMPLETED

    @property
    def running(self) -> bool:
        return self.state == ExportState.REQUESTED

    @property
    def streamed(self) -> bool:
        """Sent to the browser as it was made: the manifest is kept, the file is not."""
        return self.delivery == "http"


def export_status(export_id: str, *, store: Store) -> ExportStatus | None:
    """What ``EXPORT#{id}`` says about an export (``None``: no such export)."""
    if not EXPORT_ID_RE.match(export_id or ""):
        return None
    events = AuditRepository(store).stream_events(export_stream(export_id))
    if not events:
        return None
    first = events[0]
    detail = first.get("detail") or {}
    lifecycle = [e for e in events if e.get("action") != AuditAction.EXPORT_DOWNLOADED]
    last = lifecycle[-1]
    last_detail = last.get("detail") or {}
    return ExportStatus(
        export_id=export_id,
        request=first,
        fmt=detail.get("format", ""),
        filters=detail.get("filters", {}),
        delivery=detail.get("delivery", ""),
        state=ExportState.read(last["action"].removeprefix("export_")),
        row_count=last_detail.get("row_count", last_detail.get("rows_sent")),
        sha256=last_detail.get("sha256", ""),
        downloads=sum(1 for e in events if e.get("action") == AuditAction.EXPORT_DOWNLOADED),
    )


# "My exports": how far back a person's background exports are listed, and how many.
MY_EXPORTS_DAYS = 30
MY_EXPORTS_SHOWN = 25


def exports_requested_by(
    username: str,
    *,
    store: Store,
    days: int = MY_EXPORTS_DAYS,
    limit: int = MY_EXPORTS_SHOWN,
) -> list[ExportStatus]:
    """``username``'s exports of the last ``days`` days, newest first: the background
    ones (their ``export_requested`` events) and the ones streamed to the browser as
    they were made, whose manifests are kept (their ``export_completed`` events with
    ``http`` delivery); each export's stream says where it stands."""
    found: dict[str, ExportStatus] = {}
    for action in (AuditAction.EXPORT_REQUESTED, AuditAction.EXPORT_COMPLETED):
        filters = AuditFilters.build(
            FilterAsk(action=action), performed_by=username, default_days=days
        )
        page = audit_search(filters=filters, page_size=limit, store=store, with_chains=False)
        for row in page.rows:
            export_id = row.stream.removeprefix(export_stream(""))
            status = export_status(export_id, store=store)
            if status is None or export_id in found:
                continue
            if action == AuditAction.EXPORT_COMPLETED and status.delivery != "http":
                continue  # a background export: listed by its request
            found[export_id] = status
    newest_first = sorted(found.values(), key=lambda s: s.requested_at, reverse=True)
    return newest_first[:limit]


def export_owned(export_id: str, *, actor: Actor, store: Store) -> ExportStatus:
    """The status of an export ``actor`` requested. Export files belong to whoever
    asked for them and nobody else, whatever the role."""
    status = export_status(export_id, store=store)
    if status is None:
        raise ExportNotFound(export_id)
    if status.owner != actor.username:
        raise ExportForbidden(export_id)
    return status


def filters_from_dict(values: dict[str, Any]) -> AuditFilters:
    return AuditFilters.build(
        FilterAsk(
            since=values["since"],
            until=values["until"],
            actor=values.get("actor", ""),
            action=values.get("action", ""),
            case_id=values.get("case_id", ""),
            intent_id=values.get("intent_id", ""),
            hide_system=values.get("hide_system") == "yes",
        ),
        performed_by=values.get("performed_by", ""),
        intent_tenants=[t for t in values.get("intent_tenants", "").split(",") if t],
        actor_spellings=values.get("actor_spellings", "").split(SPELLING_SEPARATOR),
        max_days=None,
    )


def export_request(*, filters: AuditFilters, fmt: str, actor: Actor, store: Store) -> str:
    """Record a background export request (``EXPORT#{id}`` seq 1); return its id."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    export_id = new_export_id()
    export_event_append(
        store,
        export_id=export_id,
        action=AuditAction.EXPORT_REQUESTED,
        actor=actor,
        detail={"format": fmt, "filters": filters.as_dict(), "delivery": "file"},
    )
    return export_id


def export_run_requested(
    export_id: str,
    *,
    store: Store,
    stores: Sequence[Store] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> dict[str, Any] | None:
    """Run a requested background export of ``stores`` (every region; ``store`` alone
    without) into ``AUDIT_EXPORT_DIR``, its ``EXPORT#`` events in ``store``; ``None``
    if there is nothing to do (unknown id, or already finished: a redelivered task)."""
    status = export_status(export_id, store=store)
    if status is None or status.state != ExportState.REQUESTED:
        return None
    who, request_event = status.requested_by, status.request
    actor = Actor(
        username=who["username"],
        role=Role(who["role"]),
        email=who.get("email", ""),
        address=request_event.get("client_address", ""),
        correlation_id=request_event.get("correlation_id", "") or new_export_id(),
    )
    data_path, _ = export_paths(export_id, status.fmt)
    try:
        return export_to_file(
            ExportAsk(
                filters_from_dict(status.filters), status.fmt, actor, store=store, stores=stores
            ),
            out_path=data_path,
            export_id=export_id,
            progress=progress,
        )
    except Exception as exc:
        export_event_append(
            store,
            export_id=export_id,
            action=AuditAction.EXPORT_FAILED,
            actor=actor,
            detail={"reason": type(exc).__name__, "format": status.fmt},
        )
        raise


def export_download(
    export_id: str, *, actor: Actor, what: str = "file", store: Store
) -> tuple[Path, str]:
    """Check that ``actor`` requested this export and it is complete, record the
    download as an ``export_downloaded`` event, and return the path and file name.
    The event is written before a byte is served: no download goes unrecorded."""
    status = export_owned(export_id, actor=actor, store=store)
    if not status.done or (what == "file" and status.delivery != "file"):
        raise ExportNotReady(export_id)
    data_path, manifest_path = export_paths(export_id, status.fmt)
    path = data_path if what == "file" else manifest_path
    if not path.exists():
        raise ExportNotReady(export_id)
    export_event_append(
        store,
        export_id=export_id,
        action=AuditAction.EXPORT_DOWNLOADED,
        actor=actor,
        detail={"what": what, "file": path.name},
    )
    return path, path.name
