"""Audit exports (docs/design.md §7), one module per job:

- :mod:`.rows` — the formats, the CSV columns and formula neutralisation, event refs;
- :mod:`.run` — one export run: chunks hashed as they go, chain heads, signed manifest;
- :mod:`.events` — export ids and the ``EXPORT#{id}`` lifecycle events;
- :mod:`.delivery` — an export written to a file or streamed over HTTP;
- :mod:`.background` — background (Celery) requests, their status and downloads;
- :mod:`.verify` — the offline check of a file against its manifest.

The names below are re-exported so ``from reconciliation.audit.export import …`` keeps
working; new code may import from the submodules.
"""

from reconciliation.audit.export.background import (
    ExportForbidden,
    ExportNotFound,
    ExportNotReady,
    ExportStatus,
    export_download,
    export_owned,
    export_request,
    export_run_requested,
    export_status,
    filters_from_dict,
)
from reconciliation.audit.export.delivery import (
    export_dir,
    export_paths,
    export_stream_http,
    export_to_file,
    manifest_path_for,
)
from reconciliation.audit.export.events import (
    ABANDONED,
    COMPLETED,
    DOWNLOADED,
    EXPORT_ID_RE,
    FAILED,
    REQUESTED,
    export_event_append,
    export_stream,
    new_export_id,
)
from reconciliation.audit.export.rows import (
    CONTENT_TYPES,
    CSV_COLUMNS,
    FORMATS,
    FORMULA_STARTS,
    csv_row,
    event_ref,
)
from reconciliation.audit.export.run import (
    CHUNK_BYTES,
    MANIFEST_SIGNED,
    PROGRESS_EVERY_S,
    ExportRun,
    HeadsTable,
)
from reconciliation.audit.export.verify import ExportUnreadable, export_verify_offline

__all__ = [
    "ABANDONED",
    "CHUNK_BYTES",
    "COMPLETED",
    "CONTENT_TYPES",
    "CSV_COLUMNS",
    "DOWNLOADED",
    "EXPORT_ID_RE",
    "FAILED",
    "FORMATS",
    "FORMULA_STARTS",
    "MANIFEST_SIGNED",
    "PROGRESS_EVERY_S",
    "REQUESTED",
    "ExportForbidden",
    "ExportNotFound",
    "ExportNotReady",
    "ExportRun",
    "ExportStatus",
    "ExportUnreadable",
    "HeadsTable",
    "csv_row",
    "event_ref",
    "export_dir",
    "export_download",
    "export_event_append",
    "export_owned",
    "export_paths",
    "export_request",
    "export_run_requested",
    "export_status",
    "export_stream",
    "export_stream_http",
    "export_to_file",
    "export_verify_offline",
    "filters_from_dict",
    "manifest_path_for",
    "new_export_id",
]
