"""Offline verification of an export: the file against its manifest (signature, size,
SHA-256, rows, first and last event, chain heads), with the file, the manifest and the
key only — no DynamoDB.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciliation.audit.export.rows import CSV_COLUMNS, event_ref
from reconciliation.audit.export.run import MANIFEST_SIGNED, HeadsTable
from reconciliation.audit.repository import event_hash
from reconciliation.audit.signing import heads_sha256, key_id, signature_valid


class ExportUnreadable(ValueError):
    """The file or manifest handed to offline verification is not something an export
    can be (not UTF-8, not JSON, not a JSON object): there is nothing to compare."""


@dataclass(frozen=True)
class _FileDigest:
    sha256: str
    size: int
    bad_at: int | None  # offset of the first byte that is not UTF-8; None: all UTF-8


def _file_digest(path: Path) -> _FileDigest:
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
    return _FileDigest(sha.hexdigest(), size, bad_at)


def _manifest_read(path: Path) -> dict[str, Any]:
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


def _csv_events(path: Path, problems: list[str]) -> Iterator[dict[str, Any]]:
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


def _jsonl_events(path: Path, problems: list[str]) -> Iterator[dict[str, Any]]:
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
    manifest = _manifest_read(Path(manifest_path))
    missing = [k for k in (*MANIFEST_SIGNED, "signature", "chain_heads") if k not in manifest]
    if missing:
        return [f"manifest lacks {', '.join(missing)}"]
    problems = _manifest_problems(manifest) + _digest_problems(Path(file_path), manifest)
    _rows_check(Path(file_path), manifest, problems)
    return problems


def _manifest_problems(manifest: dict[str, Any]) -> list[str]:
    """The manifest against itself: its signature, and its heads against their digest."""
    problems: list[str] = []
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
    return problems


def _digest_problems(file_path: Path, manifest: dict[str, Any]) -> list[str]:
    """The file's bytes against the manifest's digest and size."""
    read = _file_digest(file_path)
    if read.bad_at is not None:
        raise ExportUnreadable(
            f"{file_path} is not UTF-8 (byte {read.bad_at}): not an audit export, or damaged"
        )
    problems: list[str] = []
    if read.sha256 != manifest["sha256"]:
        problems.append(f"sha256 mismatch: manifest {manifest['sha256']}, file {read.sha256}")
    if read.size != manifest["bytes"]:
        problems.append(f"size mismatch: manifest {manifest['bytes']} bytes, file {read.size}")
    return problems


def _rows_check(file_path: Path, manifest: dict[str, Any], problems: list[str]) -> None:
    """The file's events against the manifest: each row as read, then their count, the
    first and last, and where each stream ends; what is wrong is added to ``problems``."""
    reader = _csv_events if manifest["format"] == "csv" else _jsonl_events
    heads = HeadsTable()
    rows = 0
    first = last = None
    try:
        for event in reader(file_path, problems):
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
