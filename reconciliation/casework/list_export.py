"""A case list as CSV (docs/worklist.md, "CSV of any list"): the worklist, a queue, case
search results or the resolved history, the same rows as the page with the same
filters, every cell formula-safe (the audit export's one rule,
:func:`reconciliation.audit.export.rows.formula_safe`), and the download recorded as an
export in the audit trail before the first byte is sent.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from reconciliation.actors import Actor
from reconciliation.audit.export.events import export_event_append, new_export_id
from reconciliation.audit.export.rows import formula_safe
from reconciliation.audit.models import AuditAction
from reconciliation.cases.vocabulary import CaseState, CaseType, queue_for
from reconciliation.codes import Code
from reconciliation.currencies import amount_text
from reconciliation.stores import Store

# A queue or the resolved history is read page by page into the file, up to this many rows.
CSV_MAX_ROWS = 5000
CSV_COLUMNS = (
    "case_id",
    "case_type",
    "state",
    "queue",
    "donor_ref",
    "client_key",
    "tenant",
    "fund",
    "amount",
    "currency",
    "opened_at",
    "sla",
    "seconds_to_sla_breach",
    "assignee",
    "resolved_at",
    "resolved_by",
    "resolved_how",
)


class CaseList(Code):
    """Which list a CSV was taken from (the ``list`` of its audit event)."""

    WORKLIST = "worklist", "Worklist"
    QUEUE = "queue", "Queue"
    SEARCH = "search", "Case search"
    RESOLVED = "resolved", "Resolved cases"
    # Not a case list, but downloaded and audited the same way (docs/webhooks.md).
    DELIVERIES = "deliveries", "Delivery attempts of an endpoint"


class CsvRow(Protocol):
    def cells(self) -> list[str]: ...


@dataclass(frozen=True)
class CsvCase:
    """One row of a list's CSV: a case (a listing row or the whole case) and what the list
    adds to it (donor ref where the index has none, the SLA state and time left)."""

    case: object  # CaseRow or Case: both carry the listing attributes read below
    donor_ref: str = ""
    sla: str = ""
    breach_in_s: int | None = None

    def cells(self) -> list[str]:
        c = self.case
        queue = queue_for(CaseType.read(_attr(c, "case_type")), CaseState.read(_attr(c, "state")))
        return [
            _attr(c, "case_id"),
            CaseType.words(_attr(c, "case_type")),
            CaseState.words(_attr(c, "state")),
            queue.label if queue is not None else "",
            self.donor_ref or _attr(c, "donor_ref"),
            _attr(c, "intent_id").partition("#")[2],
            _attr(c, "tenant"),
            _attr(c, "fund"),
            _amount(c),
            _attr(c, "currency"),
            _attr(c, "opened_at"),
            self.sla,
            "" if self.breach_in_s is None else str(self.breach_in_s),
            _attr(c, "assignee"),
            _attr(c, "resolved_at"),
            _attr(c, "resolved_by"),
            _attr(c, "resolved_how"),
        ]


def _amount(case: object) -> str:
    amount = getattr(case, "amount", None)
    if amount is None:
        return ""
    return amount_text(Decimal(str(amount)), _attr(case, "currency"))


def _attr(case: object, name: str) -> str:
    value = getattr(case, name, "")
    return "" if value is None else str(value)


def csv_lines(rows: Iterable[CsvRow], columns: Sequence[str] = CSV_COLUMNS) -> Iterator[str]:
    """The header, then one formula-safe line per row, as they come (for streaming)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(cells: Iterable[str]) -> str:
        writer.writerow([formula_safe(c) for c in cells])
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(columns)
    for row in rows:
        yield line(row.cells())


def list_export_record(
    *,
    case_list: CaseList,
    name: str,
    filters: Mapping[str, str],
    actor: Actor,
    store: Store,
) -> str:
    """Record that ``actor`` downloaded ``case_list`` (``name``: which queue) narrowed by
    ``filters``: an ``export_downloaded`` event on a fresh ``EXPORT#{id}`` stream, as a
    streamed audit export's download is. Returns the export id; raises what the append
    raises, so the view sends nothing unrecorded."""
    export_id = new_export_id()
    export_event_append(
        store,
        export_id=export_id,
        action=AuditAction.EXPORT_DOWNLOADED,
        actor=actor,
        detail={
            "list": str(case_list),
            "name": name,
            "filters": dict(filters),
            "format": "csv",
        },
    )
    return export_id


def file_name(case_list: CaseList, name: str, at: str) -> str:
    """``worklist-2026-12-03T1530Z.csv``: the list, the queue, the minute (UTC)."""
    stamp = at[:16].replace(":", "") + "Z"
    parts = [str(case_list), name] if name and name != str(case_list) else [str(case_list)]
    return "-".join([*parts, stamp]) + ".csv"
