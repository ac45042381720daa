"""The pledge page (docs/design.md §11: ``/pledges/<tenant>/<key>/``): one client key of
one tenant, with its claim, pledge, ledger shard, cases and audit events."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.views.pages import VIEWING_ROLES, render_page
from reconciliation.casework.pledge_detail import pledge_detail
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.stores import home_store

# An idempotency key's limit (docs/api.md); a longer one cannot have been stored.
MAX_KEY_LENGTH = 255


@require_safe
@role_required(*VIEWING_ROLES)
def pledge_view(request: StaffRequest, tenant: str, key: str) -> HttpResponse:
    """Everything stored for ``tenant``'s ``key``, read in the key's home region; a key
    with neither a claim nor a pledge answers a 404 page that says so and offers the
    search."""
    detail = None
    if 0 < len(key) <= MAX_KEY_LENGTH and key.isprintable():
        store = home_store(claim_pk(tenant, OPERATION_CREATE_PLEDGE, key))
        detail = pledge_detail(tenant=tenant, idempotency_key=key, store=store)
    if detail is None:
        context = {"tenant": tenant, "key": key}
        return render(request, "pledges/missing.html", context, status=404)
    return render_page(request, "pledges/detail.html", None, {"detail": detail})
