"""Queue pages: one tab per queue, filters and intent-id search that update the table in
place (htmx) and work as plain GET forms, sorting by age, amount or fund (column
headers), the amount at risk per currency, "Load more" with the opaque cursor."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from django.http import Http404, HttpResponse, QueryDict
from django.http.response import HttpResponseBase
from django.urls import reverse
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.forms import BulkForm, QueueFilterForm, ResolvedFilterForm
from dashboard.staff.views.list_csv import (
    UnknownFormat,
    csv_download,
    csv_wanted,
    filters_refused,
    form_problems,
    format_refused,
)
from dashboard.staff.views.pages import (
    ACTING_ROLES,
    QUEUE_SLUGS,
    SLUG_FOR_QUEUE,
    VIEWING_ROLES,
    render_page,
    wants_partial,
)
from reconciliation import clock
from reconciliation.cases.models import Case, retry_in_flight
from reconciliation.cases.policy import bulk_actions
from reconciliation.cases.vocabulary import Queue
from reconciliation.casework.history import ResolvedFilters, assigned_page, resolved_page
from reconciliation.casework.list_export import CSV_MAX_ROWS, CaseList, CsvCase
from reconciliation.casework.notifications import sla_hours
from reconciliation.casework.rows import CaseRow
from reconciliation.casework.search import cases_for_intent
from reconciliation.casework.selectors import (
    DEFAULT_SORT,
    MAX_PAGE,
    SORT_WORDS,
    InvalidFilter,
    QueuePage,
    queue_counters,
    queue_page,
)
from reconciliation.casework.worklist import donor_refs_of, sla_of
from reconciliation.claims.models import pledge_home
from reconciliation.stores import Store, every_store, first_store

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

PAGE_SIZE = 50
FILTER_FIELDS = ("fund", "min_amount", "min_age_h", "q", "mine", "sort", "drill")
# Each sortable column: its first order when clicked, and the order a second click gives.
SORT_COLUMNS = {
    "age": ("oldest", "newest"),
    "amount": ("amount_desc", "amount"),
    "fund": ("fund", "fund_desc"),
}


def _filter_query(form: QueueFilterForm, *, sort: bool = True) -> str:
    """The filters as a query string, for shareable links (tabs, load more, refresh);
    without the order when ``sort`` is false (the column headers add their own)."""
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    values = [(name, data.get(name)) for name in FILTER_FIELDS if sort or name != "sort"]
    kept = [
        (k, "1" if v is True else v)
        for k, v in values
        if v not in (None, "", False) and not (k == "sort" and v == DEFAULT_SORT)
    ]
    return urlencode(kept)


def _sort_links(slug: str, form: QueueFilterForm, current: str) -> dict[str, dict[str, str]]:
    """Per sortable column: the link that orders by it (a second click reverses it) and
    its ``aria-sort`` when it is the current order. A new order starts at the first
    page: a cursor belongs to the order it came from."""
    base = _filter_query(form, sort=False)
    links = {}
    for column, (first, second) in SORT_COLUMNS.items():
        target = second if current == first else first
        query = "&".join(p for p in (base, urlencode({"sort": target})) if p)
        state = ""
        if current in (first, second):
            ascending = current in ("oldest", "amount", "fund")
            state = "ascending" if ascending else "descending"
        links[column] = {"url": f"{reverse('queue', args=[slug])}?{query}", "aria_sort": state}
    return links


def _intent_home(intent_id: str) -> Store:
    """Where an intent's cases live: its idempotency key's home region."""
    tenant, sep, key = intent_id.partition("#")
    return pledge_home(tenant, key) if sep else first_store()


def _queue_csv(
    request: StaffRequest, name: str, slug: str, form: QueueFilterForm
) -> HttpResponseBase:
    """The queue's open cases with the page's filters and order, every page of them (up
    to ``CSV_MAX_ROWS``), as CSV (docs/worklist.md)."""
    if form.is_bound and not form.is_valid():
        return filters_refused(form_problems(form))
    values = form.cleaned_data if form.is_bound else {}
    stores = every_store()
    hours, now = sla_hours(), clock.now()
    if values.get("q"):
        found = cases_for_intent(values["q"], store=_intent_home(values["q"]))
        rows: Iterable[CsvCase] = (CsvCase(c) for c in found)
    else:
        mine = request.user.get_username() if request.role in ACTING_ROLES else ""
        filters = form.filters(assignee=mine)
        try:
            first = queue_page(name, filters=filters, limit=MAX_PAGE, stores=stores)
        except InvalidFilter as exc:
            return filters_refused(exc.problems)

        def with_sla(row: CaseRow, donor_ref: str) -> CsvCase:
            sla = sla_of(row, hours=hours, now=now)
            return CsvCase(row, donor_ref, sla.state.label, sla.left_s)

        rows = _csv_rows(
            first,
            lambda cursor: queue_page(
                name, filters=filters, cursor=cursor, limit=MAX_PAGE, stores=stores
            ),
            with_sla,
            stores=stores,
        )
    shown = dict(parse_qsl(_filter_query(form)))
    return csv_download(request, case_list=CaseList.QUEUE, name=slug, filters=shown, rows=rows)


def _table_refresh(request: StaffRequest, cursor: str | None) -> bool:
    """The table reloading itself (``#results`` is the element that asked): after an
    action told the page ``queue-changed`` (bulk), or while a commit retry runs. Cases
    may have moved between queues, so the counts and the amount at risk are read again
    and sent with the rows. A filter, a sort or "Load more" moves no case and reads no
    counter."""
    htmx: HtmxDetails | None = getattr(request, "htmx", None)
    return cursor is None and htmx is not None and htmx.trigger == "results"


def _drill_toggled(request: StaffRequest, form: QueueFilterForm) -> bool:
    """The table reloading in place with "Show drill data" changed: the counts above it
    (tabs, amount at risk, the drill notice) change with it, so they travel along. Only
    then: any other filter leaves them as they are."""
    htmx: HtmxDetails | None = getattr(request, "htmx", None)
    if htmx is None or not htmx or not htmx.current_url:
        return False
    before = QueryDict(urlsplit(htmx.current_url).query).get("drill", "")
    now = bool(form.is_bound and form.is_valid() and form.cleaned_data.get("drill"))
    return now != (before not in ("", "0", "false", "False", "off"))


@dataclass(frozen=True)
class _Listing:
    """What a queue page lists: a page of the queue, or every case of the intent searched
    (``found``); or, with a 400 ``status``, why neither could be read."""

    page: QueuePage | None = None
    found: list[Case] | None = None
    status: int = 200
    error: str = ""

    @property
    def rows(self) -> Sequence[Case | CaseRow]:
        return self.found if self.found is not None else (self.page.rows if self.page else [])


def _queue_listing(
    request: StaffRequest, name: str, form: QueueFilterForm, cursor: str | None
) -> _Listing:
    if form.is_bound and not form.is_valid():
        return _Listing(status=400, error="Check the highlighted filters.")
    values = form.cleaned_data if form.is_bound else {}
    if values.get("q"):
        # Search by intent id: every case of that intent, whatever its queue or state.
        return _Listing(found=cases_for_intent(values["q"], store=_intent_home(values["q"])))
    try:
        # "Assigned to me" is for those who take cases; an auditor holds none.
        mine = request.user.get_username() if request.role in ACTING_ROLES else ""
        filters = form.filters(assignee=mine)
        page = queue_page(
            name, filters=filters, cursor=cursor, limit=PAGE_SIZE, stores=every_store()
        )
    except InvalidFilter as exc:
        return _Listing(status=400, error=_filters_refused(form, exc))
    return _Listing(page=page)


def _filters_refused(form: QueueFilterForm, exc: InvalidFilter) -> str:
    """Each refused filter on its field where the form has it; the page's error names
    the others."""
    problems = []
    for field, message in exc.fields.items():
        if form.is_bound and field in form.fields:
            form.add_error(field, message)
        else:
            problems.append(f"{field}: {message}")
    if problems:
        return "Cannot show this page: " + "; ".join(problems)
    return "Check the highlighted filters."


def _counts_context(form: QueueFilterForm, name: str, queue: str, query: str) -> dict[str, Any]:
    """The tabs' counts and the amount at risk: one BatchGetItem of counter items. Without
    "Show drill data" the drill's share is left out, and said how many it is."""
    context: dict[str, Any] = {}
    counters = queue_counters(stores=every_store())
    drill = bool(form.is_bound and form.is_valid() and form.cleaned_data.get("drill"))
    if not drill:
        # The drill's share of the counters (reconciliation/cases/counters.py): the
        # counts and amounts agree with the rows, which leave the drill out too.
        context["drill_left_out"] = counters[name].drill_count
        context["drill_url"] = (
            reverse("queue", args=[queue]) + "?" + "&".join(p for p in (query, "drill=1") if p)
        )
        counters = {q: c.without_drill() for q, c in counters.items()}
    context["counts"] = {q: c.count for q, c in counters.items()}
    context["counter"] = counters[name]
    return context


def _more_url(queue: str, query: str, page: QueuePage | None) -> str:
    """The queue's next page, under the same filters; none after the last."""
    if page is None or not page.next_cursor:
        return ""
    following = urlencode({"cursor": page.next_cursor})
    return reverse("queue", args=[queue]) + "?" + (f"{query}&{following}" if query else following)


@require_safe
@role_required(*VIEWING_ROLES)
def queue_view(request: StaffRequest, queue: str) -> HttpResponseBase:
    name = QUEUE_SLUGS.get(queue)
    if name is None:
        raise Http404("No such queue")
    form = QueueFilterForm(request.GET if any(f in request.GET for f in FILTER_FIELDS) else None)
    try:
        if csv_wanted(request):
            return _queue_csv(request, name, queue, form)
    except UnknownFormat:
        return format_refused()
    cursor = request.GET.get("cursor") or None
    listing = _queue_listing(request, name, form, cursor)
    page, found, listed = listing.page, listing.found, listing.rows
    query = _filter_query(form)
    can_act = request.role in ACTING_ROLES
    # The bulk menu offers only what some case listed allows (the approval queue's
    # requests are decided on the approvals page, never in bulk).
    offered = (
        bulk_actions(((r.case_type, r.state) for r in listed), request.role)
        if can_act and name != Queue.OVERRIDE_REQUESTED
        else []
    )
    valid = form.is_bound and form.is_valid()
    sort = (form.cleaned_data.get("sort") if valid else "") or DEFAULT_SORT
    context = {
        "sort": sort,
        "sort_words": SORT_WORDS.get(sort, ""),
        "sort_links": _sort_links(queue, form, sort),
        "is_cancelled_queue": name == Queue.CANCELLED_TRANSACTION,
        # A case type's own queue says its type in the tab: the column only where the
        # rows mix types (escalated, awaiting approval, an intent's every case).
        "case_type_column": found is not None
        or name in (Queue.ESCALATED, Queue.OVERRIDE_REQUESTED),
        "slug": queue,
        "queue": name,
        "tabs": QUEUE_SLUGS.items(),
        "form": form,
        "page": page,
        "found": found,
        "rows": listed,
        "cursor": cursor,
        "query": query,
        "more_url": _more_url(queue, query, page),
        "error": listing.error,
        "can_act": can_act,
        # A later page's rows keep the column the first page drew (its menu is there).
        "bulk_offered": bool(offered)
        or (bool(cursor) and can_act and name != Queue.OVERRIDE_REQUESTED),
        # The table reloads itself while a case it lists has a commit retry running.
        "polling": any(retry_in_flight(r) for r in listed),
    }
    whole = not wants_partial(request)
    if whole or _table_refresh(request, cursor) or (not cursor and _drill_toggled(request, form)):
        # The whole page has the tabs (with counts) and the bulk form; the table reloading
        # itself carries the counts out of band.
        context.update(_counts_context(form, name, queue, query), counts_oob=not whole)
    if whole:
        context["bulk_form"] = BulkForm(initial={"queue": queue}, offered=offered)
    partial = "next_page" if cursor and page is not None else "results"
    return render_page(request, "queues/queue.html", partial, context, status=listing.status)


RESOLVED_FIELDS = ("resolved_by", "how", "fund", "since", "until", "drill")


def _resolved_filters(form: ResolvedFilterForm) -> ResolvedFilters:
    data = form.cleaned_data if form.is_bound else {}
    since, until = data.get("since"), data.get("until")
    return ResolvedFilters(
        resolved_by=data.get("resolved_by", ""),
        how=data.get("how", ""),
        fund=data.get("fund", ""),
        since=clock.iso(datetime.combine(since, time.min, tzinfo=UTC)) if since else "",
        # The whole last day: up to the start of the next one.
        until=clock.iso(datetime.combine(until, time.min, tzinfo=UTC) + timedelta(days=1))
        if until
        else "",
        drill=bool(data.get("drill")),
    )


def _resolved_csv(request: StaffRequest, form: ResolvedFilterForm) -> HttpResponseBase:
    """The resolved history with the page's filters, newest first, every page of it (up
    to ``CSV_MAX_ROWS``), as CSV."""
    if form.is_bound and not form.is_valid():
        return filters_refused(form_problems(form))
    filters = _resolved_filters(form)
    stores = every_store()
    try:
        first = resolved_page(filters=filters, limit=MAX_PAGE, stores=stores)
    except InvalidFilter as exc:
        return filters_refused(exc.problems)
    rows = _csv_rows(
        first,
        lambda cursor: resolved_page(filters=filters, cursor=cursor, limit=MAX_PAGE, stores=stores),
        CsvCase,
        stores=stores,
    )

    shown = {}
    if form.is_bound:
        shown = {k: str(v) for k, v in form.cleaned_data.items() if v not in (None, "", False)}
    return csv_download(
        request, case_list=CaseList.RESOLVED, name="resolved", filters=shown, rows=rows
    )


def _csv_rows(
    first: QueuePage,
    next_page: Callable[[str], QueuePage],
    row: Callable[[CaseRow, str], CsvCase],
    *,
    stores: list[Store],
) -> Iterator[CsvCase]:
    """A list's CSV is all of it, not the page shown: every page from ``first`` on (read
    as the CSV is streamed), up to ``CSV_MAX_ROWS``, each row with its donor ref."""
    page, sent = first, 0
    while True:
        refs = donor_refs_of([r.case_id for r in page.rows], stores=stores)
        for case in page.rows[: CSV_MAX_ROWS - sent]:
            yield row(case, refs.get(case.case_id, ""))
        sent += len(page.rows)
        if not page.next_cursor or sent >= CSV_MAX_ROWS:
            return
        page = next_page(page.next_cursor)


def _tab_counts(request: StaffRequest) -> dict[str, int]:
    """Open cases per queue for the tabs of a whole page, the drill's left out as on the
    queue pages (one BatchGetItem of counter items per region); none for an htmx
    fragment, which carries no tabs."""
    if wants_partial(request):
        return {}
    counters = queue_counters(stores=every_store())
    return {q: c.without_drill().count for q, c in counters.items()}


@require_safe
@role_required(*VIEWING_ROLES)
def resolved_view(request: StaffRequest) -> HttpResponseBase:
    """Resolved cases, newest first (docs/design.md §11): who resolved each, how and when,
    filtered by resolver, disposition, fund and a range of UTC days; "Load more" with
    the cursor."""
    bound = any(f in request.GET for f in RESOLVED_FIELDS)
    form = ResolvedFilterForm(request.GET if bound else None)
    try:
        if csv_wanted(request):
            return _resolved_csv(request, form)
    except UnknownFormat:
        return format_refused()
    cursor = request.GET.get("cursor") or None
    page, status, error = None, 200, ""
    if form.is_bound and not form.is_valid():
        status, error = 400, "Check the highlighted filters."
    else:
        filters = _resolved_filters(form)
        try:
            page = resolved_page(
                filters=filters, cursor=cursor, limit=PAGE_SIZE, stores=every_store()
            )
        except InvalidFilter as exc:
            status, error = 400, "Cannot show this page: " + exc.problems
    kept = {}
    if form.is_bound and form.is_valid():
        kept = {
            k: "1" if v is True else v
            for k, v in form.cleaned_data.items()
            if v not in (None, "", False)
        }
    query = urlencode({k: str(v) for k, v in kept.items()})
    more_url = ""
    if page is not None and page.next_cursor:
        following = urlencode({"cursor": page.next_cursor})
        more_url = reverse("resolved") + "?" + (f"{query}&{following}" if query else following)
    context = {
        "form": form,
        "page": page,
        "rows": page.rows if page else [],
        "cursor": cursor,
        "query": query,
        "more_url": more_url,
        "error": error,
        "tabs": QUEUE_SLUGS.items(),
        "counts": _tab_counts(request),
        "filtered": bool(kept),
    }
    partial = "next_page" if cursor and page is not None else "results"
    return render_page(request, "queues/resolved.html", partial, context, status=status)


@require_safe
@role_required(*ACTING_ROLES)
def mine_view(request: StaffRequest) -> HttpResponse:
    """The "My cases" list: the open cases assigned to the signed-in person, in every
    queue, oldest first. Auditors take no cases, so they have no such list (403)."""
    cursor = request.GET.get("cursor") or None
    page, status, error = None, 200, ""
    try:
        page = assigned_page(
            request.user.get_username(), cursor=cursor, limit=PAGE_SIZE, stores=every_store()
        )
    except InvalidFilter as exc:
        status, error = 400, "Cannot show this page: " + exc.problems
    more_url = ""
    if page is not None and page.next_cursor:
        more_url = reverse("mine") + "?" + urlencode({"cursor": page.next_cursor})
    context = {
        "page": page,
        "rows": page.rows if page else [],
        "cursor": cursor,
        "more_url": more_url,
        "error": error,
        "tabs": QUEUE_SLUGS.items(),
        "counts": _tab_counts(request),
        "slug_for_queue": SLUG_FOR_QUEUE,
    }
    partial = "next_page" if cursor and page is not None else "results"
    return render_page(request, "queues/mine.html", partial, context, status=status)
