"""Queue pages: one tab per queue, filters and intent-id search that update the table in
place (htmx) and work as plain GET forms, "Load more" with the opaque cursor."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.forms import BulkForm, QueueFilterForm
from dashboard.views.pages import (
    ACTING_ROLES,
    QUEUE_SLUGS,
    VIEWING_ROLES,
    render_page,
    wants_partial,
)
from reconciliation.cases.models import QUEUE_APPROVAL
from reconciliation.casework.selectors import (
    InvalidFilter,
    cases_for_intent,
    queue_counts,
    queue_page,
)
from reconciliation.stores import first_store

PAGE_SIZE = 50
FILTER_FIELDS = ("fund", "min_amount", "min_age_h", "q", "mine")


def _filter_query(form: QueueFilterForm) -> str:
    """The filters as a query string, for shareable links (tabs, load more, refresh)."""
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    values = [(name, data.get(name)) for name in FILTER_FIELDS]
    kept = [(k, "1" if v is True else v) for k, v in values if v not in (None, "", False)]
    return urlencode(kept)


@require_safe
@role_required(*VIEWING_ROLES)
def queue_view(request: StaffRequest, queue: str) -> HttpResponse:
    name = QUEUE_SLUGS.get(queue)
    if name is None:
        raise Http404("No such queue")
    form = QueueFilterForm(request.GET if any(f in request.GET for f in FILTER_FIELDS) else None)
    cursor = request.GET.get("cursor") or None
    page, found, status, error = None, None, 200, ""
    if form.is_bound and not form.is_valid():
        status, error = 400, "Check the highlighted filters."
    else:
        values = form.cleaned_data if form.is_bound else {}
        if values.get("q"):
            # Search by intent id: every case of that intent, whatever its queue or state.
            found = cases_for_intent(values["q"], store=first_store())
        else:
            try:
                filters = form.filters(assignee=request.user.get_username())
                page = queue_page(
                    name, filters=filters, cursor=cursor, limit=PAGE_SIZE, store=first_store()
                )
            except InvalidFilter as exc:
                problems = []
                for field, message in exc.fields.items():
                    if form.is_bound and field in form.fields:
                        form.add_error(field, message)
                    else:
                        problems.append(f"{field}: {message}")
                status = 400
                error = (
                    "Cannot show this page: " + "; ".join(problems)
                    if problems
                    else "Check the highlighted filters."
                )
    query = _filter_query(form)
    more_url = ""
    if page is not None and page.next_cursor:
        following = urlencode({"cursor": page.next_cursor})
        more_url = f"/queues/{queue}/?" + (f"{query}&{following}" if query else following)
    can_act = request.role in ACTING_ROLES
    context = {
        "slug": queue,
        "queue": name,
        "tabs": QUEUE_SLUGS.items(),
        "form": form,
        "page": page,
        "found": found,
        "rows": found if found is not None else (page.rows if page else []),
        "cursor": cursor,
        "query": query,
        "more_url": more_url,
        "error": error,
        "can_act": can_act,
        "bulk_offered": can_act and name != QUEUE_APPROVAL,
    }
    if not wants_partial(request):
        # Only the whole page has the tabs (with counts) and the bulk form.
        context["counts"] = queue_counts(store=first_store())
        context["bulk_form"] = BulkForm(initial={"queue": queue})
    partial = "next_page" if cursor and page is not None else "results"
    return render_page(request, "queues/queue.html", partial, context, status=status)
