"""The audit screens: search, streamed exports, background exports and their downloads.

Search and exports read every region (``every_store()``, merged by time); the export's own
``EXPORT#`` events and background requests live in the first region. Auditors and
supervisors see every event; finance staff see only events they performed
themselves (the filter is imposed here, on the server, and the page says so). Views
parse input, call one selector or service, and render.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import (
    FileResponse,
    Http404,
    HttpResponse,
    HttpResponseBadRequest,
    QueryDict,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from dashboard.auth import StaffRequest, actor_for, role_required
from dashboard.staff.views.search import known_tenants
from reconciliation.actors import Role
from reconciliation.audit.day_index import CursorError
from reconciliation.audit.export.background import (
    MY_EXPORTS_DAYS,
    ExportForbidden,
    ExportNotFound,
    ExportNotReady,
    export_download,
    export_owned,
    export_request,
    exports_requested_by,
)
from reconciliation.audit.export.delivery import export_stream_http
from reconciliation.audit.export.rows import CONTENT_TYPES, FORMATS
from reconciliation.audit.export.run import ExportAsk
from reconciliation.audit.filters import AuditFilters, FilterAsk, FilterError
from reconciliation.audit.models import AuditAction
from reconciliation.audit.search import audit_search
from reconciliation.audit.staff import staff_spellings
from reconciliation.audit.tasks import export_enqueue, export_progress
from reconciliation.cases.policy import audit_visible_performer
from reconciliation.stores import every_store, first_store

AUDIT_ROLES = (Role.AUDITOR, Role.SUPERVISOR, Role.FINANCE_STAFF)
FILTER_FIELDS = ("since", "until", "actor", "action", "case_id", "intent_id", "hide_system")


class AuditSearchForm(forms.Form):
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    actor = forms.CharField(required=False, max_length=254, label="Actor (username or e-mail)")
    # Labels to choose from; the values are the stored codes, so links made with a code
    # (a bookmark, the case page's "audit trail of this case") keep working.
    action = forms.ChoiceField(
        required=False,
        choices=[("", "Any action")]
        + sorted(((a.value, a.label) for a in AuditAction), key=lambda choice: choice[1]),
    )
    case_id = forms.CharField(required=False, max_length=200, label="Case id")
    intent_id = forms.CharField(
        required=False,
        max_length=600,
        label="Intent id or client's key",
        help_text="tenant#key, or the client's own key alone: searched under every tenant.",
    )
    hide_system = forms.BooleanField(
        required=False, label="Hide system events (signed checkpoints)"
    )


def _own_only(request: StaffRequest) -> str:
    """The username finance staff are restricted to; empty for auditors and supervisors."""
    return audit_visible_performer(request.role, request.user.get_username())


def _filters(
    request: StaffRequest, data: QueryDict
) -> tuple[AuditSearchForm, AuditFilters | None, str]:
    """The bound form, the filters it describes (None when invalid) and an error."""
    form = AuditSearchForm(data)
    if not form.is_valid():
        return form, None, "Check the highlighted fields."
    values = form.cleaned_data
    try:
        filters = AuditFilters.build(
            FilterAsk(
                since=values["since"].isoformat() if values["since"] else "",
                until=values["until"].isoformat() if values["until"] else "",
                actor=values["actor"],
                action=values["action"],
                case_id=values["case_id"],
                intent_id=values["intent_id"],
                hide_system=values["hide_system"],
            ),
            performed_by=_own_only(request),
            # A bare key is searched under every tenant the system holds (as the case
            # search does); tenant#key needs none.
            intent_tenants=known_tenants() if "#" not in values["intent_id"] else (),
            actor_spellings=staff_spellings(values["actor"]),
        )
    except FilterError as exc:
        return form, None, str(exc)
    return form, filters, ""


def _filter_values(filters: AuditFilters, form: AuditSearchForm) -> dict[str, str]:
    values = {
        "since": filters.since.date().isoformat(),
        "until": filters.until.date().isoformat(),
    }
    for name in FILTER_FIELDS[2:]:
        if form.cleaned_data.get(name):
            values[name] = form.cleaned_data[name]
    return values


@require_safe
@role_required(*AUDIT_ROLES)
def audit_search_view(request: StaffRequest) -> HttpResponse:
    form, filters, error = _filters(request, request.GET)
    page = None
    query = ""
    values: dict[str, str] = {}
    status = 200
    if filters is not None:
        values = _filter_values(filters, form)
        query = urlencode(values)
        try:
            page = audit_search(
                filters=filters, cursor=request.GET.get("cursor") or None, stores=every_store()
            )
        except CursorError as exc:
            error, status = str(exc), 400
    else:
        status = 400
    context = {
        "form": form,
        "filters": filters,
        "page": page,
        "error": error,
        "query": query,
        "filters_form_values": list(values.items()),
        "own_only": bool(_own_only(request)),
        "formats": FORMATS,
    }
    template = "audit/search.html#rows" if request.htmx else "audit/search.html"
    return render(request, template, context, status=status)


def _export_response(request: StaffRequest, fmt: str) -> HttpResponseBase:
    form, filters, error = _filters(request, request.GET)
    if filters is None:
        return HttpResponseBadRequest(f"Invalid filters: {error}", content_type="text/plain")
    stores = every_store()
    run, body = export_stream_http(
        ExportAsk(filters, fmt, actor_for(request), store=stores[0], stores=stores)
    )
    response = StreamingHttpResponse(body, content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{run.file_name}"'
    response["X-Audit-Export-Id"] = run.export_id
    # The signed manifest exists once the last byte has been sent.
    response["Link"] = f'</audit/exports/{run.export_id}/manifest.json>; rel="describedby"'
    response["Cache-Control"] = "no-store"
    return response


@require_safe
@role_required(*AUDIT_ROLES)
def audit_export_csv(request: StaffRequest) -> HttpResponseBase:
    return _export_response(request, "csv")


@require_safe
@role_required(*AUDIT_ROLES)
def audit_export_jsonl(request: StaffRequest) -> HttpResponseBase:
    return _export_response(request, "jsonl")


@require_http_methods(["GET", "HEAD", "POST"])
@role_required(*AUDIT_ROLES)
def audit_exports(request: StaffRequest) -> HttpResponse:
    """GET: your own background exports of the last 30 days, newest first. POST: queue
    a large export as a background task and go to its progress page."""
    if request.method != "POST":
        exports = exports_requested_by(request.user.get_username(), store=first_store())
        context = {"exports": exports, "days": MY_EXPORTS_DAYS}
        return render(request, "audit/exports.html", context)
    fmt = request.POST.get("format", "csv")
    form, filters, error = _filters(request, request.POST)
    if filters is None or fmt not in FORMATS:
        return HttpResponseBadRequest(
            f"Invalid export request: {error or 'unknown format'}", content_type="text/plain"
        )
    export_id = export_request(
        filters=filters, fmt=fmt, actor=actor_for(request), store=first_store()
    )
    export_enqueue(export_id)
    return redirect("audit-export-status", export_id=export_id)


@require_safe
@role_required(*AUDIT_ROLES)
def audit_export_status(request: StaffRequest, export_id: str) -> HttpResponse:
    try:
        status = export_owned(export_id, actor=actor_for(request), store=first_store())
    except ExportNotFound:
        raise Http404("No such export")
    except ExportForbidden:
        raise PermissionDenied
    progress = export_progress(export_id) if status.running else None
    context = {"export": status, "progress": progress}
    template = "audit/export.html#progress" if request.htmx else "audit/export.html"
    return render(request, template, context)


def _download(request: StaffRequest, export_id: str, what: str) -> HttpResponseBase:
    try:
        path, name = export_download(
            export_id, actor=actor_for(request), what=what, store=first_store()
        )
    except ExportNotFound:
        raise Http404("No such export")
    except ExportForbidden:
        raise PermissionDenied
    except ExportNotReady:
        return HttpResponse("The export is not ready.", status=409, content_type="text/plain")
    content_type = "application/json" if what == "manifest" else None
    return FileResponse(
        open(path, "rb"),  # noqa: SIM115 (FileResponse closes it)
        as_attachment=True,
        filename=name,
        content_type=content_type,
    )


@require_safe
@role_required(*AUDIT_ROLES)
def audit_export_download(request: StaffRequest, export_id: str) -> HttpResponseBase:
    return _download(request, export_id, "file")


@require_safe
@role_required(*AUDIT_ROLES)
def audit_export_manifest(request: StaffRequest, export_id: str) -> HttpResponseBase:
    return _download(request, export_id, "manifest")
