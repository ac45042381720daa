"""An endpoint's Deliveries page (``/acks/<endpoint_id>/``, docs/webhooks.md): its
attempts from the attempt log (dashboard/tenancy/delivery_log.py), filtered by the URL, newest
first with "Load more", and ``?format=csv``; every staff role reads it. Supervisors resend
its failed deliveries since a time (``POST /acks/<endpoint_id>/resend/``): a preview,
then a confirm, then the outcome per delivery."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from botocore.exceptions import BotoCoreError, ClientError
from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, actor_for, role_required
from dashboard.staff.delivery_forms import (
    AttemptFilterForm,
    ResendConfirmForm,
    ResendPreviewForm,
)
from dashboard.staff.views.list_csv import (
    UnknownFormat,
    csv_download,
    csv_wanted,
    filters_refused,
    form_problems,
    format_refused,
)
from dashboard.staff.views.pages import ACTING_ROLES, VIEWING_ROLES, render_page
from dashboard.tenancy.delivery_log import (
    ATTEMPT_CSV_COLUMNS,
    AttemptPage,
    BadCursor,
    CsvAttempt,
    Cursor,
    endpoint_attempts,
    endpoint_attempts_all,
    endpoint_failures_since,
)
from dashboard.tenancy.models import WebhookEndpoint
from reconciliation.acks.redeliver import RedeliverRefused
from reconciliation.acks.resend import (
    RESEND_MAX,
    ResendOutcome,
    acks_resend,
    acks_resend_preview,
)
from reconciliation.actors import Role
from reconciliation.casework.list_export import CaseList
from reconciliation.claims.models import pledge_home
from reconciliation.stores import Store

COLUMNS = 7
# The preview's window starts, by default, this long before now.
DEFAULT_WINDOW_H = 24


def intent_store(intent_id: str) -> Store:
    """An intent's home region (its claim key decides it, as for the pledge page)."""
    tenant, _, key = intent_id.partition("#")
    return pledge_home(tenant, key)


def _endpoint(endpoint_id: int) -> WebhookEndpoint:
    return get_object_or_404(WebhookEndpoint.objects.select_related("tenant"), pk=endpoint_id)


@require_safe
@role_required(*VIEWING_ROLES)
def endpoint_deliveries_view(request: StaffRequest, endpoint_id: int) -> HttpResponseBase:
    endpoint = _endpoint(endpoint_id)
    try:
        as_csv = csv_wanted(request)
    except UnknownFormat:
        return format_refused()
    form = AttemptFilterForm(request.GET)
    valid = form.is_valid()
    if as_csv:
        if not valid:
            return filters_refused(form_problems(form))
        rows = (CsvAttempt(r) for r in endpoint_attempts_all(endpoint, form.filters()))
        return csv_download(
            request,
            case_list=CaseList.DELIVERIES,
            name=f"E{endpoint.pk}",
            filters=form.shown(),
            rows=rows,
            columns=ATTEMPT_CSV_COLUMNS,
        )
    status, error, before = 200, "", None
    try:
        raw = request.GET.get("before", "")
        before = Cursor.parse(raw) if raw else None
    except BadCursor:
        status, error = 400, "This page link is not one the page made: start from the first page."
    if not valid:
        status, error = 400, "Check the highlighted filters."
    page = AttemptPage([], None)
    if status == 200:
        page = endpoint_attempts(endpoint, form.filters(), before=before)
    here = reverse("acks-endpoint", args=[endpoint.pk])
    query = urlencode(form.shown())
    more_url = ""
    if page.next_cursor is not None:
        more_url = f"{here}?{urlencode({**form.shown(), 'before': page.next_cursor.text()})}"
    context = {
        "endpoint": endpoint,
        "form": form,
        "rows": page.rows,
        "more_url": more_url,
        "columns": COLUMNS,
        "retention_days": settings.DELIVERY_ATTEMPT_RETENTION_DAYS,
        "error": error,
        "filtered": bool(query),
        "later_page": before is not None,
        "first_url": here + (f"?{query}" if query else ""),
        "csv_url": f"{here}?{'&'.join(p for p in (query, 'format=csv') if p)}",
        # One delivery is sent again on its pledge page (finance staff and supervisors);
        # many at once here, by supervisors only (docs/webhooks.md, "Who may").
        "can_redeliver": request.role in ACTING_ROLES,
        "resend_form": _preview_form(endpoint) if request.role == Role.SUPERVISOR else None,
    }
    partial = "next_page" if before is not None else "results"
    return render_page(request, "acks/endpoint.html", partial, context, status=status)


def _preview_form(endpoint: WebhookEndpoint) -> ResendPreviewForm:
    """Since when, by default: when the endpoint started failing, else a day ago."""
    since = endpoint.failing_since or timezone.now() - timedelta(hours=DEFAULT_WINDOW_H)
    return ResendPreviewForm(initial={"since": since.strftime("%Y-%m-%dT%H:%M")})


@require_POST
@role_required(Role.SUPERVISOR)
def endpoint_resend_view(request: StaffRequest, endpoint_id: int) -> HttpResponse:
    """Step ``preview``: what a confirm would resend, read now; step ``confirm``: resend
    exactly that, each delivery its own audited redelivery, and the outcome of each. Bad
    input answers 400 and changes nothing."""
    endpoint = _endpoint(endpoint_id)
    if request.POST.get("step") == "confirm":
        return _confirm(request, endpoint)
    return _preview(request, endpoint)


def _preview(request: StaffRequest, endpoint: WebhookEndpoint) -> HttpResponse:
    form = ResendPreviewForm(request.POST)
    context: dict[str, object] = {"endpoint": endpoint, "preview_form": form, "step": "preview"}
    if not form.is_valid():
        return render_page(request, "acks/resend.html", None, context, status=400)
    since = form.since_utc()
    candidates, total = endpoint_failures_since(endpoint, since, limit=RESEND_MAX)
    try:
        preview = acks_resend_preview(
            [(c.intent_id, c.event_type) for c in candidates],
            endpoint_id=f"E{endpoint.pk}",
            store_for=intent_store,
        )
    except (BotoCoreError, ClientError):
        context["error"] = "The database did not answer: nothing was read; try again."
        return render_page(request, "acks/resend.html", None, context, status=503)
    confirm = ResendConfirmForm(
        initial={"preview": ResendConfirmForm.sign(endpoint.pk, preview.items)}
    )
    context.update(
        {
            "since": since,
            "preview": preview,
            "total": total,
            "left_out": max(total - len(candidates), 0),
            "confirm_form": confirm,
        }
    )
    return render_page(request, "acks/resend.html", None, context)


def _confirm(request: StaffRequest, endpoint: WebhookEndpoint) -> HttpResponse:
    form = ResendConfirmForm(request.POST)
    context: dict[str, object] = {"endpoint": endpoint, "confirm_form": form, "step": "confirm"}
    items = None
    if form.is_valid():
        try:
            items = form.items_for(endpoint.pk)
        except forms.ValidationError as exc:
            form.add_error(None, exc)
    if items is None:
        context["preview_form"] = _preview_form(endpoint)
        return render_page(request, "acks/resend.html", None, context, status=400)
    data = form.cleaned_data
    try:
        results = acks_resend(
            items,
            store_for=intent_store,
            actor=actor_for(request),
            reason_code=data["reason_code"],
            reason_text=data["reason_text"],
            bulk_id=data["action_id"],
        )
    except RedeliverRefused as exc:
        form.add_error(None, str(exc))
        return render_page(request, "acks/resend.html", None, context, status=400)
    resent = sum(1 for r in results if r.outcome == ResendOutcome.RESENT)
    level = messages.SUCCESS if resent == len(results) else messages.WARNING
    messages.add_message(
        request, level, f"{resent} of {len(results)} deliveries resent; see each below."
    )
    context.update({"step": "results", "results": results, "resent": resent})
    return render_page(request, "acks/resend.html", None, context)
