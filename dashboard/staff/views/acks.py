"""The Acknowledgements page (``/acks/``, docs/webhooks.md): per tenant its registered
endpoints with their failure rate and last success, from the counters the dispatcher
keeps on each endpoint (dashboard/tenancy/models.py · WebhookEndpoint.attempt_count): one query
of the Django database, never a scan of pledges. Every staff role reads it; nothing on it
changes anything (redelivery is on the pledge page; each endpoint's attempts and the
bulk resend on its Deliveries page, dashboard/staff/views/deliveries.py)."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from django.contrib import messages
from django.http import HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, actor_for, role_required
from dashboard.staff.forms import RedeliverForm
from dashboard.staff.links import pledge_url
from dashboard.staff.views.pages import ACTING_ROLES, VIEWING_ROLES, render_page
from dashboard.tenancy.models import WebhookEndpoint
from reconciliation.acks.models import DeliveryStatus
from reconciliation.acks.redeliver import (
    RedeliverAsk,
    RedeliverRefused,
    RedeliverSeen,
    ack_redeliver,
)
from reconciliation.claims.models import intent_id_for, pledge_home


@require_safe
@role_required(*VIEWING_ROLES)
def acks_view(request: StaffRequest) -> HttpResponse:
    endpoints = WebhookEndpoint.objects.select_related("tenant").order_by("tenant__name", "pk")
    return render_page(request, "acks/index.html", None, {"endpoints": list(endpoints)})


@require_POST
@role_required(*ACTING_ROLES)
def redeliver_view(request: StaffRequest) -> HttpResponse:
    """The pledge page's "Send again" button: one delivery due now, audited with its
    reason; then back to the pledge page, which says what happened (a refusal changes
    nothing). A form that does not parse answers 400 with the reason, never a 500."""
    form = RedeliverForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
        messages.error(request, f"Not sent again: {errors}")
        return HttpResponse(f"Not sent again: {errors}", status=400, content_type="text/plain")
    data = form.cleaned_data
    tenant, key = data["tenant"], data["key"]
    store = pledge_home(tenant, key)
    seen = RedeliverSeen(
        key=data["delivery"],
        attempts=data["seen_attempts"],
        status=DeliveryStatus.read(data["seen_status"]),
        audit_seq=data["seen_audit_seq"],
    )
    page = pledge_url(tenant, key) + "#deliveries"
    try:
        ack_redeliver(
            store,
            intent_id=intent_id_for(tenant, key),
            seen=seen,
            ask=RedeliverAsk(actor_for(request), data["reason_code"], data["reason_text"]),
        )
    except RedeliverRefused as exc:
        messages.error(request, f"Not sent again: {exc}")
    except (BotoCoreError, ClientError):
        messages.error(request, "Not sent again: the database did not answer; try again.")
    else:
        messages.success(
            request, "The delivery is due now: the dispatcher sends it within seconds."
        )
    # Back to the pledge page either way: it shows the delivery as it is now.
    return HttpResponseRedirect(page)
