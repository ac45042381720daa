"""The worklist (docs/worklist.md): every open case across the queues, filtered and
ordered by the URL, totals per currency, "Load more", the signed-in person's saved
views, and ``?format=csv``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast
from urllib.parse import urlencode

from django.db import IntegrityError, transaction
from django.http import Http404, HttpResponse, QueryDict
from django.http.response import HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.models import SavedView
from dashboard.staff.views.list_csv import (
    UnknownFormat,
    csv_download,
    csv_wanted,
    filters_refused,
    form_problems,
    format_refused,
)
from dashboard.staff.views.pages import VIEWING_ROLES, render_page, wants_partial
from dashboard.staff.worklist_forms import SavedViewForm, WorklistFilterForm, worklist_bound
from reconciliation.casework.list_export import CaseList, CsvCase
from reconciliation.casework.notifications import sla_hours
from reconciliation.casework.selectors import InvalidFilter
from reconciliation.casework.worklist import (
    Worklist,
    WorklistSort,
    worklist_read,
    worklist_rows_whole,
)
from reconciliation.stores import every_store

PAGE_SIZE = 50
COLUMNS = 10


def _owner(request: StaffRequest) -> int:
    """The signed-in person's user id (``role_required`` let only the signed-in through)."""
    return cast(int, request.user.pk)


def _start(request: StaffRequest) -> int:
    raw = request.GET.get("start", "0")
    return int(raw) if raw.isdigit() and len(raw) < 7 else 0


def _page(
    request: StaffRequest,
    form: WorklistFilterForm,
    *,
    save_form: SavedViewForm | None = None,
    status: int = 200,
) -> HttpResponse:
    worklist: Worklist | None = None
    error = ""
    if form.is_bound and not form.is_valid():
        status, error = 400, "Check the highlighted filters."
    else:
        try:
            worklist = worklist_read(
                form.filters(me=request.user.get_username()),
                stores=every_store(),
                sla_hours=sla_hours(),
            )
        except InvalidFilter as exc:
            status, error = 400, "Cannot show this list: " + exc.problems
    query = form.query()
    start = _start(request)
    rows = []
    more_url = ""
    if worklist is not None:
        rows = worklist_rows_whole(worklist.rows[start : start + PAGE_SIZE], stores=every_store())
        if len(worklist.rows) > start + PAGE_SIZE:
            following = urlencode({"start": start + PAGE_SIZE})
            more_url = reverse("worklist") + "?" + "&".join(p for p in (query, following) if p)
    sort = (
        form.cleaned_data.get("sort") if form.is_bound and form.is_valid() else ""
    ) or WorklistSort.AGE
    context = {
        "form": form,
        "worklist": worklist,
        "rows": rows,
        "query": query,
        "more_url": more_url,
        "columns": COLUMNS,
        "error": error,
        "sort": WorklistSort(sort),
        "saved_views": SavedView.objects.filter(user_id=_owner(request)),
        "save_form": save_form or SavedViewForm(initial={"query": query}),
        "csv_url": reverse("worklist") + "?" + "&".join(p for p in (query, "format=csv") if p),
        "drill_url": reverse("worklist") + "?" + "&".join(p for p in (query, "drill=1") if p),
    }
    partial = "next_page" if start and worklist is not None else "results"
    return render_page(request, "worklist/worklist.html", partial, context, status=status)


def _tidy_url(request: StaffRequest) -> str | None:
    """This URL without its empty fields, when it has any (a GET form sends every field,
    ``?fund=&min_amount=…``): empty means "not filtered", so the short URL is the same
    list, and it is the one to keep, bookmark and share. ``None`` when already tidy."""
    sent = [(k, v) for k, values in request.GET.lists() for v in values]
    kept = [(k, v) for k, v in sent if v != ""]
    if len(kept) == len(sent):
        return None
    return reverse("worklist") + (f"?{urlencode(kept)}" if kept else "")


@require_safe
@role_required(*VIEWING_ROLES)
def worklist_view(request: StaffRequest) -> HttpResponseBase:
    tidy = _tidy_url(request)
    if tidy is not None and not wants_partial(request):
        return redirect(tidy)
    form = worklist_bound(request.GET)
    try:
        wants_csv = csv_wanted(request)
    except UnknownFormat:
        return format_refused()
    if not wants_csv:
        page = _page(request, form)
        if tidy is not None:
            # The filter form's htmx request pushes its own URL to the address bar: the
            # tidy one replaces it (htmx takes the answer's HX-Push-Url over the request's).
            page["HX-Push-Url"] = tidy
        return page
    if form.is_bound and not form.is_valid():
        return filters_refused(form_problems(form))
    stores = every_store()
    try:
        worklist = worklist_read(
            form.filters(me=request.user.get_username()), stores=stores, sla_hours=sla_hours()
        )
    except InvalidFilter as exc:
        return filters_refused(exc.problems)

    def rows() -> Iterator[CsvCase]:
        for start in range(0, len(worklist.rows), 100):
            for row in worklist_rows_whole(worklist.rows[start : start + 100], stores=stores):
                yield CsvCase(row.case, row.donor_ref, row.sla.label, row.breach_in_s)

    return csv_download(
        request, case_list=CaseList.WORKLIST, name="worklist", filters=form.shown(), rows=rows()
    )


@require_POST
@role_required(*VIEWING_ROLES)
def saved_view_create(request: StaffRequest) -> HttpResponse:
    """Save the worklist's current filters under a name; bad input: the worklist again
    with the form's errors (400), nothing saved."""
    save_form = SavedViewForm(request.POST)
    if save_form.is_valid():
        name, query = save_form.cleaned_data["name"], save_form.cleaned_data["query"]
        try:
            with transaction.atomic():
                SavedView.objects.create(user_id=_owner(request), name=name, query=query)
        except IntegrityError:
            save_form.add_error("name", "You already have a view with this name.")
        else:
            return redirect(reverse("worklist") + (f"?{query}" if query else ""))
    filters = worklist_bound(_query_of(request.POST.get("query", "")))
    return _page(request, filters, save_form=save_form, status=400)


def _query_of(raw: str) -> QueryDict:
    return QueryDict(raw.strip().lstrip("?")[:2000])


@require_POST
@role_required(*VIEWING_ROLES)
def saved_view_delete(request: StaffRequest, view_id: int) -> HttpResponse:
    """Delete one of one's own saved views; another person's is not found (404)."""
    deleted, _ = SavedView.objects.filter(id=view_id, user_id=_owner(request)).delete()
    if not deleted:
        raise Http404("No such saved view")
    return redirect("worklist")
