"""Case search (docs/design.md §11: ``/cases/?q=``): find cases by what a person was told —
the case id, the client's own idempotency key, or the donor ref."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.http.response import HttpResponseBase
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.forms import CaseSearchForm
from dashboard.staff.views.list_csv import (
    UnknownFormat,
    csv_download,
    csv_wanted,
    filters_refused,
    format_refused,
)
from dashboard.staff.views.pages import SLUG_FOR_QUEUE, VIEWING_ROLES, render_page
from dashboard.tenancy.models import ApiToken, Tenant
from reconciliation.casework.list_export import CaseList, CsvCase
from reconciliation.casework.search import (
    Found,
    FoundPledge,
    case_search,
    pledge_search,
    pledges_without_drill,
    without_drill,
)
from reconciliation.casework.selectors import InvalidFilter
from reconciliation.stores import every_store, home_store

MATCHED_WORDS = {
    "case_id": "case id",
    "client_key": "client's idempotency key",
    "donor_ref": "donor ref",
}


def known_tenants() -> list[str]:
    """Every tenant the dashboard knows: registered ones and those holding API tokens
    (a key is searched under each, since staff are told the key, not the tenant)."""
    names = set(Tenant.objects.values_list("name", flat=True))
    names.update(ApiToken.objects.values_list("tenant", flat=True).distinct())
    return sorted(n for n in names if n)


@dataclass
class _Search:
    """What a search found (``found`` is ``None`` until one ran) and what it left out of
    the drill's; or, with a 400 ``status``, why it could not run."""

    found: list[Found] | None = None
    pledges: list[FoundPledge] = field(default_factory=list)
    status: int = 200
    error: str = ""
    left_out: int = 0
    pledges_left_out: int = 0


def _search(form: CaseSearchForm, *, drill: bool, as_csv: bool) -> _Search:
    """Run the search the form asks for: cases, and unless for the CSV (which lists
    cases, as every list's CSV does) the client keys stored."""
    searched = _Search()
    if not form.is_bound:
        return searched
    if not form.is_valid():
        searched.status = 400
        searched.error = "; ".join(str(e) for e in form.errors.get("q", ["Check the search."]))
        return searched
    query = form.cleaned_data["q"]
    if not query:
        searched.error = "Type a case id (C-…), the client's idempotency key or a donor ref."
        return searched
    try:
        tenants, stores = known_tenants(), every_store()
        searched.found = case_search(query, tenants=tenants, stores=stores, home=home_store)
        if not as_csv:
            searched.pledges = pledge_search(query, tenants=tenants, stores=stores, home=home_store)
    except InvalidFilter as exc:
        searched.status, searched.error = 400, exc.problems
    if searched.found is not None and not drill:
        searched.found, searched.left_out = without_drill(searched.found)
        searched.pledges, searched.pledges_left_out = pledges_without_drill(searched.pledges)
    return searched


@require_safe
@role_required(*VIEWING_ROLES)
def case_search_view(request: StaffRequest) -> HttpResponseBase:
    form = CaseSearchForm(request.GET if "q" in request.GET else None)
    try:
        as_csv = csv_wanted(request)
    except UnknownFormat:
        return format_refused()
    drill = form.is_valid() and bool(form.cleaned_data.get("drill"))
    searched = _search(form, drill=drill, as_csv=as_csv)
    found, error = searched.found, searched.error
    if as_csv:
        if error and searched.status == 400:
            return filters_refused(error)
        query = form.cleaned_data.get("q", "") if form.is_bound and form.is_valid() else ""
        return csv_download(
            request,
            case_list=CaseList.SEARCH,
            name="search",
            filters={"q": query, **({"drill": "1"} if drill else {})},
            rows=[CsvCase(f.case) for f in found or []],
        )
    rows = [
        {
            "case": f.case,
            "matched": MATCHED_WORDS.get(f.matched, f.matched),
            "tenant": f.tenant,
            "queue_slug": SLUG_FOR_QUEUE.get(f.case.queue or ""),
        }
        for f in found or []
    ]
    context = {
        "form": form,
        "query": form.cleaned_data.get("q", "") if form.is_bound and form.is_valid() else "",
        "found": found,
        "rows": rows,
        "pledges": [
            {"found": p, "matched": MATCHED_WORDS.get(p.matched, p.matched)}
            for p in searched.pledges
        ],
        "error": error,
        "left_out": searched.left_out,
        "pledges_left_out": searched.pledges_left_out,
        # The navigation's search box shows what was searched for, as typed, so a
        # person refines it there too (the page's own box keeps it the same way).
        "nav_query": request.GET.get("q", ""),
        "drill_query": urlencode({"q": request.GET.get("q", ""), "drill": "1"}),
        "csv_query": urlencode(
            {"q": request.GET.get("q", ""), **({"drill": "1"} if drill else {}), "format": "csv"}
        ),
    }
    return render_page(request, "cases/search.html", "results", context, status=searched.status)
