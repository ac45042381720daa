"""One audit export run: CSV or JSON Lines encoded in constant memory, the chain heads it
covers, and its signed manifest.

An export reads the ``by_day`` index page by page (:class:`DayIndexReader`; with every
region's store, a k-way merge of the regions' shards by time, each region's own streams
only, so each event is one row however Global Tables replicate it), encodes
rows into chunks of about 64 KB and hashes the bytes as they go, so memory does not grow
with the number of rows. The chain heads it covers (the last exported ``seq`` of each
stream) are per stream, not per row: they are kept in a temporary on-disk SQLite table,
so a million streams cost disk, not memory, and come back sorted for the manifest.

The manifest is JSON. ``signature`` is HMAC-SHA256 under ``AUDIT_SIGNING_KEY`` over the
canonical JSON of every other field except ``chain_heads``, which is covered through
``chain_heads_sha256`` (so the manifest can be written as a stream). Checking a file
against it needs the file, the manifest and the key; no DynamoDB.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from reconciliation import clock
from reconciliation.actors import Actor
from reconciliation.audit.day_index import DayIndexReader, Paging, decode_event
from reconciliation.audit.export.events import new_export_id
from reconciliation.audit.export.rows import CSV_COLUMNS, FORMATS, csv_row, event_ref
from reconciliation.audit.filters import AuditFilters
from reconciliation.audit.repository import canonical_json
from reconciliation.audit.signing import heads_sha256, key_id, sign
from reconciliation.dynamo.items import RawItem
from reconciliation.stores import Store

CHUNK_BYTES = 64 * 1024
PROGRESS_EVERY_S = 0.5
# Manifest fields the signature covers (all but chain_heads and the signature itself).
MANIFEST_SIGNED = (
    "manifest_version",
    "export_id",
    "file",
    "format",
    "filters",
    "row_count",
    "bytes",
    "sha256",
    "first_event",
    "last_event",
    "chain_heads_count",
    "chain_heads_sha256",
    "generated_at",
    "generated_by",
    "key_id",
    "algorithm",
)


class HeadsTable:
    """The highest ``seq`` seen per stream, in a temporary on-disk SQLite table."""

    def __init__(self) -> None:
        # "" opens a private temporary database that SQLite keeps on disk and deletes
        # on close; its page cache (2 MB by default) bounds the memory it uses.
        self.db = sqlite3.connect("")
        self.db.execute(
            "CREATE TABLE heads (stream TEXT PRIMARY KEY, seq INTEGER, hash TEXT) WITHOUT ROWID"
        )
        self.pending: list[tuple[str, int, str]] = []

    def add(self, stream: str, seq: int, digest: str) -> None:
        self.pending.append((stream, seq, digest))
        if len(self.pending) >= 5000:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.db.executemany(
                "INSERT INTO heads VALUES (?, ?, ?) ON CONFLICT(stream) DO UPDATE SET "
                "seq = excluded.seq, hash = excluded.hash WHERE excluded.seq > heads.seq",
                self.pending,
            )
            self.pending = []

    def rows(self) -> Iterator[tuple[str, int, str]]:
        self.flush()
        yield from self.db.execute("SELECT stream, seq, hash FROM heads ORDER BY stream")

    def digest(self) -> tuple[int, str]:
        return heads_sha256(self.rows())

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class ExportAsk:
    """What to export (``filters``, ``fmt``), for whom, and from where: ``stores`` are the
    regions read (every region's, merged; ``store``'s alone without); ``store`` is where
    the export's own ``EXPORT#`` events go (the first region)."""

    filters: AuditFilters
    fmt: str
    actor: Actor
    store: Store
    stores: Sequence[Store] | None = None


@dataclass
class ExportRun:
    """One export: iterate :meth:`chunks` for the bytes, then :meth:`write_manifest`.

    ``progress(rows, fraction)`` is called at most every half second while reading.
    ``stores`` are the regions read (every region's, merged; ``store``'s alone without);
    ``store`` is where the export's own ``EXPORT#`` events go (the first region).
    """

    filters: AuditFilters
    fmt: str
    actor: Actor
    store: Store
    export_id: str = field(default_factory=new_export_id)
    stores: Sequence[Store] | None = None
    prefetch: bool = True
    progress: Callable[[int, float], None] | None = None
    row_count: int = 0
    byte_count: int = 0
    first_event: dict[str, Any] | None = None
    last_event: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}")
        self.sha = hashlib.sha256()
        self.heads = HeadsTable()
        self.generated_at = clock.iso(clock.now())
        self.reader = DayIndexReader(
            list(self.stores or [self.store]), self.filters, paging=Paging(prefetch=self.prefetch)
        )

    @property
    def file_name(self) -> str:
        return f"audit-{self.export_id}.{self.fmt}"

    def chunks(self) -> Iterator[bytes]:
        """The export's bytes, about 64 KB at a time; hashed and counted as they go."""
        buffer = io.StringIO()
        encode: Callable[[RawItem], None]
        if self.fmt == "csv":
            writer = csv.writer(buffer)
            writer.writerow(CSV_COLUMNS)

            def encode(item: RawItem) -> None:
                writer.writerow(csv_row(item))
        else:

            def encode(item: RawItem) -> None:
                buffer.write(canonical_json(decode_event(item)).decode("utf-8"))
                buffer.write("\n")

        last_report = 0.0
        last_item = None
        items = iter(self.reader)
        try:
            for item in items:
                encode(item)
                self.row_count += 1
                if self.first_event is None:
                    self.first_event = event_ref(decode_event(item))
                last_item = item
                self.heads.add(item["stream"]["S"], int(item["seq"]["N"]), item["hash"]["S"])
                if buffer.tell() >= CHUNK_BYTES:
                    yield self._emit(buffer)
                    buffer.seek(0)
                    buffer.truncate()
                    if self.progress:
                        now = clock.now().timestamp()
                        if now - last_report >= PROGRESS_EVERY_S:
                            last_report = now
                            self.progress(self.row_count, self.reader.fraction_done)
        finally:
            items.close()
        if buffer.tell():
            yield self._emit(buffer)
        if last_item is not None:
            self.last_event = event_ref(decode_event(last_item))
        if self.progress:
            self.progress(self.row_count, 1.0)

    def _emit(self, buffer: io.StringIO) -> bytes:
        data = buffer.getvalue().encode("utf-8")
        self.sha.update(data)
        self.byte_count += len(data)
        return data

    def manifest_core(self) -> dict[str, Any]:
        count, heads_sha = self.heads.digest()
        core = {
            "manifest_version": 1,
            "export_id": self.export_id,
            "file": self.file_name,
            "format": self.fmt,
            "filters": self.filters.as_dict(),
            "row_count": self.row_count,
            "bytes": self.byte_count,
            "sha256": self.sha.hexdigest(),
            "first_event": self.first_event,
            "last_event": self.last_event,
            "chain_heads_count": count,
            "chain_heads_sha256": heads_sha,
            "generated_at": self.generated_at,
            "generated_by": self.actor.as_audit(),
            "key_id": key_id(),
            "algorithm": "HMAC-SHA256",
        }
        core["signature"] = sign({k: core[k] for k in MANIFEST_SIGNED})
        return core

    def write_manifest(self, out: IO[str]) -> dict[str, Any]:
        """Write the manifest to ``out``, the heads streamed one a line; return the core."""
        core = self.manifest_core()
        text = json.dumps(core, indent=2, sort_keys=True, ensure_ascii=False)
        out.write(text[: text.rindex("}")].rstrip() + ',\n  "chain_heads": [')
        first = True
        for stream, seq, digest in self.heads.rows():
            out.write(("\n    " if first else ",\n    ") + json.dumps([stream, seq, digest]))
            first = False
        out.write("\n  ]\n}\n" if not first else "]\n}\n")
        return core

    def close(self) -> None:
        self.heads.close()
