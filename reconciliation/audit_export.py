"""Audit exports: CSV and JSON Lines streamed in constant memory, the signed manifest,
the ``EXPORT#{id}`` events, and the offline check of a file against its manifest.

An export reads the ``by_day`` index page by page (:class:`DayIndexReader`), encodes
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

import codecs
import csv
import hashlib
import io
import json
import os
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.repositories import Repositories, repositories
from reconciliation.repositories.audit import audit_event_build, canonical_json, event_hash
from reconciliation.selectors_audit import (
    AuditFilters,
    DayIndexReader,
    decode_event,
    decode_value,
)
from reconciliation.services.audit import (
    audit_append,
    heads_sha256,
    key_id,
    sign,
    signature_valid,
)

FORMATS = ("csv", "jsonl")
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
EXPORT_ID_RE = re.compile(r"^[0-9a-f]{32}$")
CHUNK_BYTES = 64 * 1024
PROGRESS_EVERY_S = 0.5
CSV_COLUMNS = (
    "at",
    "stream",
    "seq",
    "event_id",
    "action",
    "actor_username",
    "actor_email",
    "actor_role",
    "client_address",
    "correlation_id",
    "case_id",
    "intent_id",
    "disposition",
    "reason_code",
    "reason_text",
    "before",
    "after",
    "detail",
    "prev_hash",
    "hash",
)
# A spreadsheet treats a cell that starts with one of these as a formula (OWASP "CSV
# injection"); a leading apostrophe makes it text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
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

REQUESTED, COMPLETED, FAILED, ABANDONED, DOWNLOADED = (
    "export_requested",
    "export_completed",
    "export_failed",
    "export_abandoned",
    "export_downloaded",
)


def new_export_id() -> str:
    return uuid.uuid4().hex


def export_stream(export_id: str) -> str:
    return f"EXPORT#{export_id}"


def _text(values: dict, name: str) -> str:
    value = values.get(name)
    if value is None:
        return ""
    text = value.get("S")
    if text is None:
        text = value.get("N")
    return text if text is not None else _json_cell(value)


def _json_cell(value: dict | None) -> str:
    plain = None if value is None else decode_value(value)
    return "" if plain is None else canonical_json(plain).decode("utf-8")


def csv_row(item: dict) -> list[str]:
    """One CSV row straight from a raw DynamoDB item (no intermediate event dict: an
    export encodes every row, and this is its hot path). Every cell that a spreadsheet
    would read as a formula is neutralised."""
    actor = (item.get("actor") or {}).get("M") or {}
    row = [
        _text(item, "at"),
        _text(item, "stream"),
        _text(item, "seq"),
        _text(item, "event_id"),
        _text(item, "action"),
        _text(actor, "username"),
        _text(actor, "email"),
        _text(actor, "role"),
        _text(item, "client_address"),
        _text(item, "correlation_id"),
        _text(item, "case_id"),
        _text(item, "intent_id"),
        _text(item, "disposition"),
        _text(item, "reason_code"),
        _text(item, "reason_text"),
        _json_cell(item.get("before")),
        _json_cell(item.get("after")),
        _json_cell(item.get("detail")),
        _text(item, "prev_hash"),
        _text(item, "hash"),
    ]
    return ["'" + c if c.startswith(FORMULA_STARTS) else c for c in row]


def event_ref(event: dict) -> dict:
    return {
        "stream": event["stream"],
        "seq": event["seq"],
        "event_id": event.get("event_id"),
        "at": event.get("at"),
        "hash": event.get("hash"),
    }


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


@dataclass
class ExportRun:
    """One export: iterate :meth:`chunks` for the bytes, then :meth:`write_manifest`.

    ``progress(rows, fraction)`` is called at most every half second while reading.
    """

    filters: AuditFilters
    fmt: str
    actor: Actor
    export_id: str = field(default_factory=new_export_id)
    repos: Repositories | None = None
    prefetch: bool = True
    progress: Callable[[int, float], None] | None = None
    row_count: int = 0
    byte_count: int = 0
    first_event: dict | None = None
    last_event: dict | None = None

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}")
        self.repos = self.repos or repositories()
        self.sha = hashlib.sha256()
        self.heads = HeadsTable()
        self.generated_at = clock.iso(clock.now())
        self.reader = DayIndexReader(self.repos.audit, self.filters, prefetch=self.prefetch)

    @property
    def file_name(self) -> str:
        return f"audit-{self.export_id}.{self.fmt}"

    def chunks(self) -> Iterator[bytes]:
        """The export's bytes, about 64 KB at a time; hashed and counted as they go."""
        buffer = io.StringIO()
        encode: Callable[[dict], None]
        if self.fmt == "csv":
            writer = csv.writer(buffer)
            writer.writerow(CSV_COLUMNS)

            def encode(item: dict) -> None:
                writer.writerow(csv_row(item))
        else:

            def encode(item: dict) -> None:
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

    def manifest_core(self) -> dict:
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

    def write_manifest(self, out: IO[str]) -> dict:
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


# --- files and events --------------------------------------------------------------------


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


def _atomic_write_manifest(run: ExportRun, path: Path) -> dict:
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        core = run.write_manifest(out)
    os.replace(tmp, path)
    return core


def _event_detail(run: ExportRun, core: dict, **extra: Any) -> dict:
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


def export_event_append(
    repos: Repositories, *, export_id: str, action: str, actor: Actor, detail: dict
) -> dict | None:
    """Append an event to ``EXPORT#{id}``; a second ``export_completed`` is refused."""
    stream = export_stream(export_id)

    def build(seq: int, prev: str) -> dict | None:
        if action in (COMPLETED, FAILED) and seq > 1:
            earlier = repos.audit.stream_events(stream)
            if any(e.get("action") in (COMPLETED, FAILED) for e in earlier):
                return None  # a redelivered task finished it already
        return audit_event_build(
            stream=stream,
            seq=seq,
            prev_hash=prev,
            action=action,
            actor=actor,
            detail=detail,
        )

    return audit_append(repos, stream=stream, build=build)


def export_stream_http(
    *, filters: AuditFilters, fmt: str, actor: Actor, repos: Repositories | None = None
) -> tuple[ExportRun, Iterator[bytes]]:
    """An export to stream over HTTP: the bytes, then (when the last chunk has gone)
    the manifest in ``AUDIT_EXPORT_DIR`` and the ``export_completed`` event. A client
    that disconnects closes the generator: the event then says ``export_abandoned``."""
    repos = repos or repositories()
    run = ExportRun(filters=filters, fmt=fmt, actor=actor, repos=repos)

    def body() -> Iterator[bytes]:
        outcome, why = ABANDONED, "client disconnected"
        try:
            yield from run.chunks()
            _, manifest_path = export_paths(run.export_id, fmt)
            core = _atomic_write_manifest(run, manifest_path)
            export_event_append(
                repos,
                export_id=run.export_id,
                action=COMPLETED,
                actor=actor,
                detail=_event_detail(run, core, delivery="http"),
            )
            outcome = COMPLETED
        except Exception as exc:  # not GeneratorExit: a client that left is handled below
            outcome, why = FAILED, type(exc).__name__
            raise
        finally:
            if outcome != COMPLETED:
                # Part of the trail left the building: say how much, and why it stopped.
                export_event_append(
                    repos,
                    export_id=run.export_id,
                    action=outcome,
                    actor=actor,
                    detail={
                        "format": fmt,
                        "filters": filters.as_dict(),
                        "rows_sent": run.row_count,
                        "bytes_sent": run.byte_count,
                        "delivery": "http",
                        "reason": why,
                    },
                )
            run.close()

    return run, body()


def export_to_file(
    *,
    filters: AuditFilters,
    fmt: str,
    actor: Actor,
    out_path: Path,
    export_id: str | None = None,
    repos: Repositories | None = None,
    progress: Callable[[int, float], None] | None = None,
    delivery: str = "file",
) -> dict:
    """Write an export and its manifest (default ``FILE.manifest.json``) and the
    ``export_completed`` event; return the manifest core. The file appears under its
    name only when complete (written to ``.part``, then renamed)."""
    repos = repos or repositories()
    manifest_path = manifest_path_for(out_path)
    run = ExportRun(
        filters=filters,
        fmt=fmt,
        actor=actor,
        repos=repos,
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
        repos,
        export_id=run.export_id,
        action=COMPLETED,
        actor=actor,
        detail=_event_detail(run, core, delivery=delivery, file=run.file_name),
    )
    return core


# --- background exports (Celery) ------------------------------------------------------------


class ExportNotFound(Exception):
    """No export has this id."""


class ExportForbidden(Exception):
    """Export files belong to the user who requested them, and to nobody else."""


class ExportNotReady(Exception):
    """The export has not finished (or failed), so there is nothing to download."""


@dataclass(frozen=True)
class ExportStatus:
    export_id: str
    request: dict  # the stream's first event: who asked, from where, when, for what
    fmt: str
    filters: dict
    delivery: str
    state: str  # the last lifecycle action: requested, completed, failed, abandoned
    row_count: int | None
    sha256: str
    downloads: int

    @property
    def requested_by(self) -> dict:
        return self.request["actor"]

    @property
    def owner(self) -> str:
        return self.requested_by["username"]

    @property
    def requested_at(self) -> str:
        return self.request["at"]

    @property
    def done(self) -> bool:
        return self.state == "completed"

    @property
    def running(self) -> bool:
        return self.state == "requested"


def export_status(export_id: str, *, repos: Repositories | None = None) -> ExportStatus | None:
    """What ``EXPORT#{id}`` says about an export (``None``: no such export)."""
    if not EXPORT_ID_RE.match(export_id or ""):
        return None
    repos = repos or repositories()
    events = repos.audit.stream_events(export_stream(export_id))
    if not events:
        return None
    first = events[0]
    detail = first.get("detail") or {}
    lifecycle = [e for e in events if e.get("action") != DOWNLOADED]
    last = lifecycle[-1]
    last_detail = last.get("detail") or {}
    return ExportStatus(
        export_id=export_id,
        request=first,
        fmt=detail.get("format", ""),
        filters=detail.get("filters", {}),
        delivery=detail.get("delivery", ""),
        state=last["action"].removeprefix("export_"),
        row_count=last_detail.get("row_count", last_detail.get("rows_sent")),
        sha256=last_detail.get("sha256", ""),
        downloads=sum(1 for e in events if e.get("action") == DOWNLOADED),
    )


def export_owned(
    export_id: str, *, actor: Actor, repos: Repositories | None = None
) -> ExportStatus:
    """The status of an export ``actor`` requested. Export files belong to whoever
    asked for them and nobody else, whatever the role."""
    status = export_status(export_id, repos=repos)
    if status is None:
        raise ExportNotFound(export_id)
    if status.owner != actor.username:
        raise ExportForbidden(export_id)
    return status


def filters_from_dict(values: dict) -> AuditFilters:
    return AuditFilters.build(
        since=values["since"],
        until=values["until"],
        actor=values.get("actor", ""),
        action=values.get("action", ""),
        case_id=values.get("case_id", ""),
        intent_id=values.get("intent_id", ""),
        performed_by=values.get("performed_by", ""),
        max_days=None,
    )


def export_request(
    *, filters: AuditFilters, fmt: str, actor: Actor, repos: Repositories | None = None
) -> str:
    """Record a background export request (``EXPORT#{id}`` seq 1); return its id."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    repos = repos or repositories()
    export_id = new_export_id()
    export_event_append(
        repos,
        export_id=export_id,
        action=REQUESTED,
        actor=actor,
        detail={"format": fmt, "filters": filters.as_dict(), "delivery": "file"},
    )
    return export_id


def export_run_requested(
    export_id: str,
    *,
    repos: Repositories | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> dict | None:
    """Run a requested background export into ``AUDIT_EXPORT_DIR``; ``None`` if there
    is nothing to do (unknown id, or already finished: a redelivered task)."""
    repos = repos or repositories()
    status = export_status(export_id, repos=repos)
    if status is None or status.state != "requested":
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
            filters=filters_from_dict(status.filters),
            fmt=status.fmt,
            actor=actor,
            out_path=data_path,
            export_id=export_id,
            repos=repos,
            progress=progress,
        )
    except Exception as exc:
        export_event_append(
            repos,
            export_id=export_id,
            action=FAILED,
            actor=actor,
            detail={"reason": type(exc).__name__, "format": status.fmt},
        )
        raise


def export_download(
    export_id: str, *, actor: Actor, what: str = "file", repos: Repositories | None = None
) -> tuple[Path, str]:
    """Check that ``actor`` requested this export and it is complete, record the
    download as an ``export_downloaded`` event, and return the path and file name.
    The event is written before a byte is served: no download goes unrecorded."""
    repos = repos or repositories()
    status = export_owned(export_id, actor=actor, repos=repos)
    if not status.done or (what == "file" and status.delivery != "file"):
        raise ExportNotReady(export_id)
    data_path, manifest_path = export_paths(export_id, status.fmt)
    path = data_path if what == "file" else manifest_path
    if not path.exists():
        raise ExportNotReady(export_id)
    export_event_append(
        repos,
        export_id=export_id,
        action=DOWNLOADED,
        actor=actor,
        detail={"what": what, "file": path.name},
    )
    return path, path.name


# --- offline verification ------------------------------------------------------------------


class ExportUnreadable(ValueError):
    """The file or manifest handed to offline verification is not something an export
    can be (not UTF-8, not JSON, not a JSON object): there is nothing to compare."""


def _file_digest(path: Path) -> tuple[str, int, int | None]:
    """SHA-256 and size of ``path``, and the offset of its first byte that is not UTF-8
    (``None``: all UTF-8), in one pass with constant memory."""
    sha = hashlib.sha256()
    size = 0
    bad_at: int | None = None
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
            if bad_at is None:
                # A multi-byte character may straddle blocks: the decoder holds its start.
                pending = len(decoder.getstate()[0])
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:
                    bad_at = size - pending + exc.start
            size += len(block)
    if bad_at is None:
        pending = len(decoder.getstate()[0])
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            bad_at = size - pending + exc.start
    return sha.hexdigest(), size, bad_at


def _manifest_read(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ExportUnreadable(f"manifest {path} is not UTF-8 (byte {exc.start})") from exc
    except OSError as exc:
        raise ExportUnreadable(f"manifest {path} is unreadable: {exc.strerror}") from exc
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ExportUnreadable(f"manifest {path} is not JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(manifest), "a number"
        )
        raise ExportUnreadable(f"manifest {path} is {kind}, not a JSON object")
    return manifest


def _csv_events(path: Path, problems: list[str]) -> Iterator[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(header) != CSV_COLUMNS:
            problems.append("CSV header differs from the export's columns")
            return
        for row in reader:
            values = dict(zip(CSV_COLUMNS, row, strict=False))
            try:
                seq = int(values["seq"])
            except (KeyError, ValueError):
                problems.append(f"row {reader.line_num}: seq is not a number")
                continue
            yield {
                "stream": values["stream"],
                "seq": seq,
                "event_id": values["event_id"],
                "at": values["at"],
                "hash": values["hash"],
            }


def _jsonl_events(path: Path, problems: list[str]) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            try:
                event = json.loads(line)
            except ValueError:
                problems.append(f"line {number}: not JSON")
                continue
            if not isinstance(event, dict):
                problems.append(f"line {number}: not a JSON object")
                continue
            if not isinstance(event.get("stream"), str) or type(event.get("seq")) is not int:
                problems.append(f"line {number}: lacks a stream and a whole-number seq")
                continue
            # JSON Lines rows are the stored events: each carries its own hash.
            if event_hash(event) != event.get("hash"):
                problems.append(
                    f"line {number}: event {event.get('stream')} seq {event.get('seq')} "
                    f"hash mismatch: expected {event_hash(event)} stored {event.get('hash')}"
                )
            yield event


def export_verify_offline(file_path: Path, manifest_path: Path) -> list[str]:
    """Problems with a file against its manifest (none: it is the export the manifest
    describes, and the manifest was signed with this key).

    Raises :class:`ExportUnreadable` when the manifest is not a JSON object or the file
    is not UTF-8: then nothing can be compared."""
    problems: list[str] = []
    manifest = _manifest_read(Path(manifest_path))
    missing = [k for k in (*MANIFEST_SIGNED, "signature", "chain_heads") if k not in manifest]
    if missing:
        return [f"manifest lacks {', '.join(missing)}"]
    if manifest["key_id"] != key_id():
        problems.append(
            f"signature key mismatch: manifest signed with key {manifest['key_id']}, "
            f"the configured key is {key_id()}"
        )
    elif not signature_valid({k: manifest[k] for k in MANIFEST_SIGNED}, manifest["signature"]):
        problems.append("signature mismatch: the manifest was altered or signed with another key")
    try:
        listed = heads_sha256(manifest["chain_heads"])
    except (TypeError, ValueError):  # not a list of [stream, seq, hash]
        listed = None
    if listed != (manifest["chain_heads_count"], manifest["chain_heads_sha256"]):
        problems.append("chain heads mismatch: the listed heads do not match chain_heads_sha256")

    digest, size, bad_at = _file_digest(Path(file_path))
    if bad_at is not None:
        raise ExportUnreadable(
            f"{file_path} is not UTF-8 (byte {bad_at}): not an audit export, or damaged"
        )
    if digest != manifest["sha256"]:
        problems.append(f"sha256 mismatch: manifest {manifest['sha256']}, file {digest}")
    if size != manifest["bytes"]:
        problems.append(f"size mismatch: manifest {manifest['bytes']} bytes, file {size}")

    reader = _csv_events if manifest["format"] == "csv" else _jsonl_events
    heads = HeadsTable()
    rows = 0
    first = last = None
    try:
        for event in reader(Path(file_path), problems):
            rows += 1
            if first is None:
                first = event_ref(event)
            last = event
            heads.add(event["stream"], int(event["seq"]), event["hash"])
        file_heads = heads.digest()
    finally:
        heads.close()
    if rows != manifest["row_count"]:
        problems.append(f"row count mismatch: manifest {manifest['row_count']}, file {rows}")
    if first != manifest["first_event"]:
        problems.append("first event mismatch: the file does not start where the manifest says")
    if (event_ref(last) if last else None) != manifest["last_event"]:
        problems.append("last event mismatch: the file does not end where the manifest says")
    if file_heads != (manifest["chain_heads_count"], manifest["chain_heads_sha256"]):
        problems.append("chain heads mismatch: the file's streams end elsewhere than listed")
    return problems
