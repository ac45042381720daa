"""The pledge page (docs/design.md §11: ``/pledges/<tenant>/<key>/``): one client key of
one tenant, with its claim, pledge, ledger shard, cases, audit events and request log;
and the refused intake requests of a tenant (``/requests/rejected/``)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.forms import RedeliverForm, RejectedRequestsForm
from dashboard.staff.views.pages import ACTING_ROLES, VIEWING_ROLES, render_page
from dashboard.staff.views.search import known_tenants
from dashboard.tenancy.delivery_log import pledge_attempts
from reconciliation.acks.deliveries import DeliveryRow, pledge_acks
from reconciliation.casework.pledge_detail import PledgeDetail, pledge_detail
from reconciliation.claims.models import pledge_home
from reconciliation.claims.request_log import rejections_on
from reconciliation.stores import every_store

# An idempotency key's limit (docs/api.md); a longer one cannot have been stored.
MAX_KEY_LENGTH = 255


@require_safe
@role_required(*VIEWING_ROLES)
def pledge_view(request: StaffRequest, tenant: str, key: str) -> HttpResponse:
    """Everything stored for ``tenant``'s ``key``, read in the key's home region; a key
    with neither a claim, a pledge nor a logged answer answers a 404 page that says so
    and offers the search."""
    detail: PledgeDetail | None = None
    if 0 < len(key) <= MAX_KEY_LENGTH and key.isprintable():
        store = pledge_home(tenant, key)
        detail = pledge_detail(tenant=tenant, idempotency_key=key, store=store)
    if detail is None:
        missing = {"tenant": tenant, "key": key}
        return render(request, "pledges/missing.html", missing, status=404)
    acks = pledge_acks(detail.intent_id, store=store) if detail.pledge else None
    # Each delivery with its "Send again" form (finance staff and supervisors only).
    delivery_rows: list[tuple[DeliveryRow, RedeliverForm | None]] = []
    for n, row in enumerate(acks.rows if acks else ()):
        form = None
        if detail.pledge and request.role in ACTING_ROLES:
            form = RedeliverForm(
                index=n,
                initial={
                    "tenant": tenant,
                    "key": key,
                    "delivery": row.delivery.key,
                    "seen_attempts": row.delivery.attempts,
                    "seen_status": str(row.delivery.status),
                    "seen_audit_seq": detail.pledge.audit_seq,
                },
            )
        delivery_rows.append((row, form))
    context = {
        "detail": detail,
        "acks": acks,
        "delivery_rows": delivery_rows,
        "attempts": pledge_attempts(tenant, detail.intent_id) if detail.pledge else [],
        "log_days": settings.REQUEST_LOG_TTL_S // 86400,
    }
    return render_page(request, "pledges/detail.html", None, context)


@require_safe
@role_required(*VIEWING_ROLES)
def pledge_query_view(request: StaffRequest) -> HttpResponseBase:
    """The pledge page of ``?tenant=…&key=…``: the link for a tenant or key that is ``.``
    or ``..``, which no path can carry past a browser (dashboard/staff/links.py)."""
    return pledge_view(request, request.GET.get("tenant", ""), request.GET.get("key", ""))


@require_safe
@role_required(*VIEWING_ROLES)
def rejected_requests_view(request: StaffRequest) -> HttpResponse:
    """A tenant's refused intake requests (4xx) of one UTC day, newest first, with their
    error codes: those refused before a key was known are listed here only. A bad tenant
    or day is a 400 with the form's message, never a 500."""
    tenants = known_tenants()
    form = RejectedRequestsForm(request.GET or None, tenants=tenants)
    rows, status = None, 200
    if form.is_bound:
        if form.is_valid():
            rows = rejections_on(
                form.cleaned_data["tenant"],
                form.cleaned_data["day"].isoformat(),
                stores=every_store(),
            )
        else:
            status = 400
    context = {"form": form, "rows": rows, "tenants": tenants}
    return render_page(request, "pledges/rejected.html", None, context, status=status)
