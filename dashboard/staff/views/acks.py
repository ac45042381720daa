"""The Acknowledgements page (``/acks/``, docs/webhooks.md): per tenant its registered
endpoints with their failure rate and last success, from the counters the dispatcher
keeps on each endpoint (dashboard/models.py · WebhookEndpoint.attempt_count): one query
of the Django database, never a scan of pledges. Every staff role reads it; nothing on it
changes anything (redelivery is on the pledge page)."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.models import WebhookEndpoint
from dashboard.staff.views.pages import VIEWING_ROLES, render_page


@require_safe
@role_required(*VIEWING_ROLES)
def acks_view(request: StaffRequest) -> HttpResponse:
    endpoints = WebhookEndpoint.objects.select_related("tenant").order_by("tenant__name", "pk")
    return render_page(request, "acks/index.html", None, {"endpoints": list(endpoints)})
