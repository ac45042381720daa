"""Where an export goes: a file in ``AUDIT_EXPORT_DIR`` (written whole, then renamed)
or an HTTP response streamed as it is read, each with its signed manifest beside it and
the ``export_completed`` event — or, for a stream cut short, ``export_abandoned`` or
``export_failed`` saying how much left.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

from reconciliation.audit.export.events import EXPORT_ID_RE, export_event_append, new_export_id
from reconciliation.audit.export.rows import FORMATS
from reconciliation.audit.export.run import ExportAsk, ExportRun
from reconciliation.audit.models import AuditAction


def export_dir() -> Path:
    path = Path(settings.AUDIT_EXPORT_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def export_paths(export_id: str, fmt: str) -> tuple[Path, Path]:
    """Data file and manifest of an export in ``AUDIT_EXPORT_DIR``."""
    if not EXPORT_ID_RE.match(export_id) or fmt not in FORMATS:
        raise ValueError("not an export id")
    base = export_dir() / f"audit-{export_id}.{fmt}"
    return base, manifest_path_for(base)


def manifest_path_for(data_path: Path) -> Path:
    return Path(f"{data_path}.manifest.json")


def _atomic_write_manifest(run: ExportRun, path: Path) -> dict[str, Any]:
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        core = run.write_manifest(out)
    os.replace(tmp, path)
    return core


def _event_detail(run: ExportRun, core: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "format": run.fmt,
        "filters": run.filters.as_dict(),
        "row_count": run.row_count,
        "bytes": run.byte_count,
        "sha256": core["sha256"],
        "first_event": core["first_event"],
        "last_event": core["last_event"],
        "chain_heads_count": core["chain_heads_count"],
        "chain_heads_sha256": core["chain_heads_sha256"],
        "manifest_signature": core["signature"],
        **extra,
    }


def export_stream_http(ask: ExportAsk) -> tuple[ExportRun, Iterator[bytes]]:
    """An export of ``ask.stores`` (every region; ``ask.store`` alone without) to stream
    over HTTP: the bytes, then (when the last chunk has gone) the manifest in
    ``AUDIT_EXPORT_DIR`` and the ``export_completed`` event in ``ask.store``. A client
    that disconnects closes the generator: the event then says ``export_abandoned``."""
    store, actor = ask.store, ask.actor
    run = ExportRun(filters=ask.filters, fmt=ask.fmt, actor=actor, store=store, stores=ask.stores)

    def body() -> Iterator[bytes]:
        outcome, why = AuditAction.EXPORT_ABANDONED, "client disconnected"
        try:
            yield from run.chunks()
            _, manifest_path = export_paths(run.export_id, ask.fmt)
            core = _atomic_write_manifest(run, manifest_path)
            export_event_append(
                store,
                export_id=run.export_id,
                action=AuditAction.EXPORT_COMPLETED,
                actor=actor,
                detail=_event_detail(run, core, delivery="http"),
            )
            outcome = AuditAction.EXPORT_COMPLETED
        except Exception as exc:  # not GeneratorExit: a client that left is handled below
            outcome, why = AuditAction.EXPORT_FAILED, type(exc).__name__
            raise
        finally:
            if outcome != AuditAction.EXPORT_COMPLETED:
                # Part of the trail left the building: say how much, and why it stopped.
                export_event_append(
                    store,
                    export_id=run.export_id,
                    action=outcome,
                    actor=actor,
                    detail={
                        "format": ask.fmt,
                        "filters": ask.filters.as_dict(),
                        "rows_sent": run.row_count,
                        "bytes_sent": run.byte_count,
                        "delivery": "http",
                        "reason": why,
                    },
                )
            run.close()

    return run, body()


def export_to_file(
    ask: ExportAsk,
    *,
    out_path: Path,
    export_id: str | None = None,
    progress: Callable[[int, float], None] | None = None,
    delivery: str = "file",
) -> dict[str, Any]:
    """Write an export of ``ask.stores`` (every region; ``ask.store`` alone without) and
    its manifest (default ``FILE.manifest.json``) and the ``export_completed`` event in
    ``ask.store``; return the manifest core. The file appears under its name only when
    complete (written to ``.part``, then renamed)."""
    manifest_path = manifest_path_for(out_path)
    run = ExportRun(
        filters=ask.filters,
        fmt=ask.fmt,
        actor=ask.actor,
        store=ask.store,
        stores=ask.stores,
        progress=progress,
        export_id=export_id or new_export_id(),
    )
    part = Path(f"{out_path}.part")
    try:
        with open(part, "wb") as out:
            for chunk in run.chunks():
                out.write(chunk)
        os.replace(part, out_path)
        core = _atomic_write_manifest(run, manifest_path)
    finally:
        run.close()
        part.unlink(missing_ok=True)
    export_event_append(
        ask.store,
        export_id=run.export_id,
        action=AuditAction.EXPORT_COMPLETED,
        actor=ask.actor,
        detail=_event_detail(run, core, delivery=delivery, file=run.file_name),
    )
    return core
