"""``?format=csv`` on a case list (docs/worklist.md): the download recorded in the audit
trail first, then the rows streamed as an attachment that no cache keeps. The lists'
own views choose the rows (the same filters as their page) and call :func:`csv_download`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from botocore.exceptions import BotoCoreError, ClientError
from django import forms
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from dashboard.auth import actor_for
from reconciliation import clock
from reconciliation.audit.append import AuditAppendContended
from reconciliation.casework.list_export import (
    CSV_COLUMNS,
    CaseList,
    CsvRow,
    csv_lines,
    file_name,
    list_export_record,
)
from reconciliation.stores import first_store

FORMATS = ("csv",)


class UnknownFormat(ValueError):
    pass


def csv_wanted(request: HttpRequest) -> bool:
    """Whether the list was asked for as CSV; a format the lists do not offer raises
    :class:`UnknownFormat` (the view answers 400)."""
    fmt = request.GET.get("format", "")
    if fmt and fmt not in FORMATS:
        raise UnknownFormat(fmt)
    return fmt == "csv"


def format_refused() -> HttpResponse:
    return HttpResponse(
        "format: this list is offered as csv only (?format=csv).",
        status=400,
        content_type="text/plain; charset=utf-8",
    )


def form_problems(form: forms.Form) -> str:
    """A bound form's errors in one line: ``field: message; …``."""
    return "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())


def filters_refused(message: str) -> HttpResponse:
    return HttpResponse(
        f"Cannot export this list: {message}", status=400, content_type="text/plain; charset=utf-8"
    )


def csv_download(
    request: HttpRequest,
    *,
    case_list: CaseList,
    name: str,
    filters: Mapping[str, str],
    rows: Iterable[CsvRow],
    columns: Sequence[str] = CSV_COLUMNS,
) -> HttpResponseBase:
    """The list's rows as a CSV attachment, streamed; audited before the first byte (no
    audit event, no file: a 503 that says so)."""
    try:
        export_id = list_export_record(
            case_list=case_list,
            name=name,
            filters={k: str(v) for k, v in filters.items()},
            actor=actor_for(request),
            store=first_store(),
        )
    except (BotoCoreError, ClientError, AuditAppendContended):
        return HttpResponse(
            "The audit trail could not record this export just now, so nothing was sent. "
            "Try again.",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
    response = StreamingHttpResponse(
        csv_lines(rows, columns), content_type="text/csv; charset=utf-8"
    )
    at = clock.iso(clock.now())
    response["Content-Disposition"] = f'attachment; filename="{file_name(case_list, name, at)}"'
    response["Cache-Control"] = "no-store"
    response["X-Audit-Export-Id"] = export_id
    return response
