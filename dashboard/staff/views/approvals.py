"""Override requests awaiting a supervisor: who asked, why, how old, when it expires;
approve or reject with a note. Requests are pinned to the case version they were raised
against and a supervisor never decides their own (the services refuse both too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import actor_for, role_required
from dashboard.lib.statuses import case_refusal_status
from dashboard.staff.forms import DecisionForm, DrillForm, staff_action
from dashboard.staff.notifications import notify_override_decided
from dashboard.staff.views.pages import render_page, wants_partial
from reconciliation.actors import Role
from reconciliation.audit.models import AuditAction
from reconciliation.cases.actions import ActionResult
from reconciliation.cases.changes import CaseError, CaseNotFound
from reconciliation.cases.models import Case, OverrideRequest
from reconciliation.cases.vocabulary import Queue
from reconciliation.casework.evidence import DecisionEvidence, evidence_of_cases
from reconciliation.casework.overrides import override_approve, override_reject
from reconciliation.casework.rows import CaseRow
from reconciliation.casework.selectors import (
    InvalidFilter,
    QueueFilters,
    case_detail,
    cases_with_evidence,
    queue_counters,
    queue_page,
)
from reconciliation.stores import case_store, every_store

PAGE_SIZE = 50


@dataclass(frozen=True)
class RequestCard:
    """One request as the approvals page shows it: the case (a queue row or a full case),
    its pending override, what reads of its pledge and claim found (``None``: not read,
    the request no longer pending), whether the viewer raised it, the decision form and,
    once decided here, the result."""

    case: CaseRow | Case
    override: OverrideRequest | None
    evidence: DecisionEvidence | None
    own: bool
    form: DecisionForm | None
    result: ActionResult | None = None


def _card(
    request: HttpRequest,
    case: CaseRow | Case,
    evidence: DecisionEvidence | None,
    form: DecisionForm | None = None,
    result: ActionResult | None = None,
) -> RequestCard:
    override = case.override
    requester = override.requested_by.username if override else ""
    if form is None and override:
        form = DecisionForm(case_id=case.case_id, initial={"request_id": override.request_id})
    return RequestCard(
        case=case,
        override=override,
        evidence=evidence,
        own=bool(requester) and requester == request.user.get_username(),
        form=form,
        result=result,
    )


def _evidence(case_ids: list[str]) -> dict[str, DecisionEvidence]:
    """The pledge and claim of each pending request's case, so a supervisor decides from
    the card: a fixed number of BatchGetItem calls per region, whatever the page's size."""
    found = cases_with_evidence(case_ids, stores=every_store())
    return {case_id: seen.evidence for case_id, seen in found.items()}


def _approvals_response(
    request: HttpRequest, *, status: int = 200, failed: dict[str, DecisionForm] | None = None
) -> HttpResponse:
    cursor = request.GET.get("cursor") or None
    form = DrillForm(request.GET if "drill" in request.GET else None)
    drill = bool(form.is_valid() and form.cleaned_data["drill"])
    page, error = None, ""
    try:
        page = queue_page(
            Queue.OVERRIDE_REQUESTED,
            filters=QueueFilters(drill=drill),
            cursor=cursor,
            limit=PAGE_SIZE,
            stores=every_store(),
        )
    except InvalidFilter as exc:
        error, status = exc.problems, 400
    failed = failed or {}
    rows = page.rows if page else []
    evidence = _evidence([row.case_id for row in rows if row.override])
    items = [
        _card(request, row, evidence.get(row.case_id), failed.get(row.case_id)) for row in rows
    ]
    kept = {"drill": "1"} if drill else {}
    more_url = ""
    if page is not None and page.next_cursor:
        more_url = reverse("approvals") + "?" + urlencode({**kept, "cursor": page.next_cursor})
    context: dict[str, object] = {
        "page": page,
        "items": items,
        "cursor": cursor,
        "error": error,
        "more_url": more_url,
        "form": form,
        "first_url": reverse("approvals") + ("?drill=1" if drill else ""),
    }
    if not cursor and not drill:
        # The drill's waiting requests, from the counters' drill share (one BatchGetItem).
        waiting = queue_counters(stores=every_store())[Queue.OVERRIDE_REQUESTED]
        context["drill_left_out"] = waiting.drill_count
        context["drill_url"] = reverse("approvals") + "?drill=1"
    partial = "next_page" if cursor and page is not None else "requests"
    return render_page(request, "approvals/list.html", partial, context, status=status)


@require_safe
@role_required(Role.SUPERVISOR)
def approvals_view(request: HttpRequest) -> HttpResponse:
    return _approvals_response(request)


def _pending_request(case_id: str, request_id: str) -> OverrideRequest | None:
    """The pending request ``request_id`` as read before deciding it: whom to tell."""
    case = case_detail(case_id, store=case_store(case_id))
    override = case.override if case else None
    return override if override and override.request_id == request_id else None


def _decide(
    request: HttpRequest,
    case_id: str,
    decide: Callable[..., ActionResult],
    outcome: AuditAction,
) -> HttpResponse:
    """Run ``decide`` (override_approve or override_reject: one signature) on the form;
    once applied, the requester is told the ``outcome``."""
    form = DecisionForm(request.POST, case_id=case_id)
    result, status = None, 200
    if not form.is_valid():
        status = 400
        messages.error(request, "Nothing was decided: check the highlighted fields.")
    else:
        try:
            data = form.cleaned_data
            pending = _pending_request(case_id, data["request_id"])
            result = decide(
                case_id=case_id,
                request_id=data["request_id"],
                staff=staff_action(data, actor_for(request)),
                store=case_store(case_id),
            )
        except CaseNotFound as exc:
            raise Http404(str(exc)) from exc
        except CaseError as exc:
            status = case_refusal_status(exc)
            form.add_error(None, str(exc))
            messages.error(request, f"Not decided: {exc}")
        else:
            messages.success(request, result.message)
            if result.applied and pending:
                notify_override_decided(
                    case_id=case_id,
                    request=pending,
                    action=outcome,
                    actor=request.user.get_username(),
                )
    if not wants_partial(request):
        if result is not None:
            return redirect("approvals")
        return _approvals_response(request, status=status, failed={case_id: form})
    case = case_detail(case_id, store=case_store(case_id))
    if case is None:
        raise Http404("No such case")
    # A card still pending (the decision refused) shows its evidence again, read now.
    evidence = None
    if case.override is not None:
        evidence = evidence_of_cases(case_store(case_id), [case])[case_id]
    item = _card(request, case, evidence, None if result else form, result)
    context = {"item": item, "oob_messages": True}
    return render_page(request, "approvals/list.html", "request", context, status=status)


@require_POST
@role_required(Role.SUPERVISOR)
def override_approve_view(request: HttpRequest, case_id: str) -> HttpResponse:
    return _decide(request, case_id, override_approve, AuditAction.OVERRIDE_APPROVED)


@require_POST
@role_required(Role.SUPERVISOR)
def override_reject_view(request: HttpRequest, case_id: str) -> HttpResponse:
    return _decide(request, case_id, override_reject, AuditAction.OVERRIDE_REJECTED)
