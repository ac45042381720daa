"""The Funds page (``/funds/``): every tenant's funds, each with its largest single
amount, and the tenant's intake rate limit: what intake checks a request against
(docs/api.md). Supervisors and auditors read it; supervisors register a fund or change
its limit here (``fund_register``: audited on the tenant's stream), as ``add_fund`` does.
Removing a fund stays in /admin/: pledges already made to it keep their ledger."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, actor_for, role_required
from dashboard.staff.forms import FundForm
from dashboard.staff.views.pages import render_page
from dashboard.tenancy.models import Tenant
from dashboard.tenancy.tenant_changes import fund_register
from reconciliation.actors import Role

READERS = (Role.SUPERVISOR, Role.AUDITOR)


def _page(request: StaffRequest, form: FundForm, *, status: int = 200) -> HttpResponse:
    tenants = Tenant.objects.prefetch_related("funds").order_by("name")
    context = {
        "tenants": list(tenants),
        "form": form,
        "may_change": request.user.groups.filter(name=Role.SUPERVISOR).exists(),
        "default_rate": settings.INTAKE_RATE_PER_S,
        "default_burst": settings.INTAKE_BURST,
    }
    return render_page(request, "funds/funds.html", None, context, status=status)


@require_safe
@role_required(*READERS)
def funds_view(request: StaffRequest) -> HttpResponse:
    return _page(request, FundForm())


@require_POST
@role_required(Role.SUPERVISOR)
def fund_set_view(request: StaffRequest) -> HttpResponse:
    """Register a fund, or change its limit; bad input: the page again with the form's
    errors (400), nothing written."""
    form = FundForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    tenant, fund = form.cleaned_data["tenant"], form.cleaned_data["fund"]
    _, new = fund_register(tenant, fund, actor=actor_for(request))
    what = "registered" if new else "limit set"
    messages.success(request, f"{tenant.name}: {fund.code} in {fund.currency} {what}.")
    return redirect("funds")
