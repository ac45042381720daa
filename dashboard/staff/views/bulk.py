"""Bulk dispositions on selected cases of a queue: a preview (dry run) of what each
selected case would become, then the apply, each case its own audited change.

Split from dashboard/staff/views/cases.py (behaviour unchanged).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.views.decorators.http import require_POST

from dashboard.auth import StaffRequest, actor_for, role_required
from dashboard.lib.statuses import case_refusal_status
from dashboard.staff.forms import BulkForm, new_action_id, staff_action
from dashboard.staff.views.pages import ACTING_ROLES, QUEUE_SLUGS, render_page, wants_partial
from reconciliation.cases.changes import CaseError
from reconciliation.cases.policy import LABELS
from reconciliation.casework.dispositions import cases_bulk
from reconciliation.casework.selectors import MAX_PAGE
from reconciliation.stores import case_store


@require_POST
@role_required(*ACTING_ROLES)
def cases_bulk_view(request: StaffRequest) -> HttpResponse:
    """Preview (dry run: what each selected case would become), then apply, each case its
    own audited change; the answer lists the outcome per case."""
    form = BulkForm(request.POST)
    case_ids = list(dict.fromkeys(c for c in request.POST.getlist("case_ids") if c))
    rows, status = None, 200
    valid = form.is_valid()
    if not case_ids:
        form.add_error(None, "Select at least one case in the table.")
    elif len(case_ids) > MAX_PAGE:
        form.add_error(None, f"Select at most {MAX_PAGE} cases at a time.")
    preview = valid and form.cleaned_data["step"] == "preview"
    if not form.errors:
        data = form.cleaned_data
        try:
            rows = cases_bulk(
                store_for=case_store,
                case_ids=case_ids,
                disposition=data["disposition"],
                staff=staff_action(data, actor_for(request)),
                dry_run=preview,
            )
        except CaseError as exc:
            form.add_error(None, str(exc))
            status = case_refusal_status(exc)
    else:
        status = 400
    if form.errors:
        messages.error(request, "Nothing was changed: check the bulk form.")
    elif not preview and rows is not None:  # rows is None only with form errors
        done = sum(1 for r in rows if r.ok)
        level = messages.SUCCESS if done == len(rows) else messages.WARNING
        messages.add_message(
            request,
            level,
            f"{LABELS.get(data['disposition'], data['disposition'])}: {done} of "
            f"{len(rows)} cases done; see the result per case.",
        )
    slug = request.POST.get("queue", "")
    context = {
        "form": form,
        "rows": rows,
        "preview": preview and rows is not None,
        "applied": not preview and rows is not None,
        "ready_ids": [r.case_id for r in rows or [] if r.ok],
        "confirm_action_id": new_action_id(),
        "slug": slug if slug in QUEUE_SLUGS else "",
        "oob_messages": wants_partial(request),
    }
    response = render_page(request, "cases/bulk.html", "panel", context, status=status)
    if context["applied"] and wants_partial(request):
        # The queue table reloads itself (same filters) when cases have moved on.
        response["HX-Trigger"] = "queue-changed"
    return response
