"""Export rows: the formats, the CSV columns, a CSV row straight from a raw DynamoDB item
with every cell a spreadsheet would read as a formula neutralised, and the reference to
an event that a manifest names (first and last event).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciliation.audit.day_index import decode_value
from reconciliation.audit.repository import canonical_json
from reconciliation.dynamo.items import RawItem

FORMATS = ("csv", "jsonl")
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
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


def formula_safe(cell: str) -> str:
    """``cell`` as a spreadsheet reads it as text: a leading apostrophe before anything
    it would read as a formula. Every CSV this system writes passes its cells here (the
    audit export and the case lists' ``?format=csv``)."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def _text(values: RawItem, name: str) -> str:
    value = values.get(name)
    if value is None:
        return ""
    text = value.get("S")
    if text is None:
        text = value.get("N")
    return text if text is not None else _json_cell(value)


def _json_cell(value: Mapping[str, Any] | None) -> str:
    plain = None if value is None else decode_value(value)
    return "" if plain is None else canonical_json(plain).decode("utf-8")


def csv_row(item: RawItem) -> list[str]:
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
    return [formula_safe(c) for c in row]


def event_ref(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "stream": event["stream"],
        "seq": event["seq"],
        "event_id": event.get("event_id"),
        "at": event.get("at"),
        "hash": event.get("hash"),
    }
