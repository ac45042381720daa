"""The case page (summary, decoded cancellation reasons, live evidence, token window,
audit timeline) and the actions on a case: dispositions, override requests and
assignment (bulk dispositions on selected cases of a queue: dashboard/staff/views/bulk.py).

Every action form carries the case version it was rendered from and a fresh action id;
the services refuse a stale version (the page then shows who changed the case, when,
and the fresh state: 409) and apply an action id once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from botocore.exceptions import BotoCoreError, ClientError
from django.contrib import messages
from django.forms import Form
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, actor_for, role_required
from dashboard.lib.statuses import case_refusal_status
from dashboard.staff.forms import (
    AssignForm,
    DispositionForm,
    NoteForm,
    OverrideRequestForm,
    staff_action,
)
from dashboard.staff.notifications import (
    mentions_in,
    notify_assigned,
    notify_mentions,
    notify_override_requested,
)
from dashboard.staff.views.pages import (
    ACTING_ROLES,
    SLUG_FOR_QUEUE,
    VIEWING_ROLES,
    render_page,
    wants_partial,
)
from dashboard.templatetags.dashboard_format import exact, intent
from reconciliation.actors import Actor, Role
from reconciliation.audit.chains import SubjectHead, SubjectKind, case_chain_status
from reconciliation.cases.actions import ActionResult, StaffAction
from reconciliation.cases.changes import CaseChanged, CaseError, CaseNotFound, InvalidReason
from reconciliation.cases.models import Case, retry_in_flight
from reconciliation.cases.policy import (
    DISPOSITIONS,
    LABELS,
    OVERRIDES,
    EvidenceFacts,
    offered_actions,
    withheld_actions,
)
from reconciliation.cases.vocabulary import CaseAction, CaseState, Disposition, Queue, ReasonCode
from reconciliation.casework.dispositions import case_assign, case_dispose, case_unassign
from reconciliation.casework.evidence import Decided, DecisionEvidence, evidence_facts
from reconciliation.casework.next_case import next_open_case
from reconciliation.casework.notes import case_note_add
from reconciliation.casework.overrides import override_request
from reconciliation.casework.selectors import (
    Evidence,
    case_detail,
    case_evidence,
    case_timeline,
)
from reconciliation.casework.suggestions import (
    Suggestion,
    case_suggestion,
    resolution_words,
)
from reconciliation.dynamo.retry import RetriesExhausted
from reconciliation.stores import Store, case_store, every_store

logger = logging.getLogger(__name__)

# The id of the case page's poller while a commit retry runs in the background: its
# requests (HX-Target) get the poller back while the retry runs, the whole case after.
POLLER = "case-live"

# The forms whose choices are narrowed to what the role may do on the case now.
CHOICE_FORM_CLASSES: dict[str, type[DispositionForm] | type[OverrideRequestForm]] = {
    "dispose": DispositionForm,
    "override": OverrideRequestForm,
}
FORM_CLASSES: dict[str, type[Form]] = {**CHOICE_FORM_CLASSES, "assign": AssignForm}


def _case_or_404(case_id: str, store: Store) -> Case:
    case = case_detail(case_id, store=store)
    if case is None:
        raise Http404("No such case")
    return case


class EvidenceRead:
    """The live evidence of a case, or why it could not be read (``error``); what an
    action just read and wrote (``known``) is taken as it is, not read again."""

    def __init__(self, case: Case, store: Store, known: DecisionEvidence | None = None):
        self.case = case
        self.evidence: Evidence | None = None
        self.error = ""
        if case.is_drift:
            return  # a fund-level finding: no claim or pledge of its own to read
        try:
            self.evidence = case_evidence(
                case, store=store, ledger_stores=every_store(), known=known
            )
        except (ClientError, BotoCoreError, RetriesExhausted) as exc:
            # The page still answers: it says the evidence is unknown and offers what the
            # services accept (they read the evidence again before acting).
            code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else ""
            self.error = code or exc.__class__.__name__
            logger.warning("case %s: evidence unreadable (%s)", case.case_id, self.error)

    @property
    def facts(self) -> EvidenceFacts | None:
        if self.evidence is None:
            return None
        return evidence_facts(
            case=self.case, pledge=self.evidence.pledge, claim=self.evidence.claim
        )


def _accepted(request: StaffRequest, suggestion: Suggestion | None) -> dict[str, dict[str, Any]]:
    """What "Accept suggestion" pre-fills: the suggested choice and reason, in the form
    that takes it, when ``?accept=`` names the action suggested now (a stale link
    pre-fills nothing). The person still reviews and submits it."""
    wanted = request.GET.get("accept", "")
    if suggestion is None or not suggestion.action or suggestion.action != wanted:
        return {}
    name = suggestion.form or ""
    choice = CHOICE_FORM_CLASSES[name].choice_field
    return {
        name: {
            choice: suggestion.action,
            "reason_code": suggestion.reason_code or "",
            "reason_text": suggestion.reason_text,
        }
    }


def _offered(case: Case, role: Role, facts: EvidenceFacts | None) -> list[CaseAction]:
    """The actions this role is offered on this case now. Only what the evidence lets
    through (``facts``; ``None``: unknown, so what the role may start, and the services
    check the evidence themselves), and no second retry while one runs."""
    return offered_actions(
        case.case_type, case.state, role, facts, retry_running=retry_in_flight(case)
    )


@dataclass(frozen=True)
class Withheld:
    """An action the role could start but the evidence rules out: shown disabled."""

    action: CaseAction
    label: str
    reason: str


def _withheld(case: Case, role: Role, facts: EvidenceFacts | None) -> list[Withheld]:
    """What the evidence rules out on this case now, each with its one-line reason."""
    refused = withheld_actions(
        case.case_type, case.state, role, facts, retry_running=retry_in_flight(case)
    )
    return [Withheld(action, LABELS[action], why) for action, why in refused.items()]


def _offer_key(case: Case, role: Role, facts: EvidenceFacts | None) -> str:
    """What the actions card offers, as a short key the page sends back when it refreshes
    the evidence: while the key still holds, the card is left alone, so a reason being
    typed or a choice filled in from the suggestion is not wiped by a fresh read."""
    return f"{case.version}:{int(facts is None)}:{','.join(_offered(case, role, facts))}"


def _forms(
    case: Case,
    role: Role,
    bound: dict[str, Form],
    keep: dict[str, dict[str, Any]],
    facts: EvidenceFacts | None,
) -> dict[str, Form]:
    """The action forms this role is offered on this case now (:func:`_offered`): a
    bound form when it is being re-shown with errors, else a fresh one (current version,
    new action id)."""
    allowed = _offered(case, role, facts)
    forms: dict[str, Form] = {}
    withheld = _withheld(case, role, facts)
    for name, kinds in (("dispose", DISPOSITIONS), ("override", OVERRIDES)):
        offered = [a for a in allowed if a in kinds]
        if not offered:
            continue
        # A form bound under "dispose" or "override" was made by CHOICE_FORM_CLASSES[name].
        re_shown = cast("DispositionForm | OverrideRequestForm | None", bound.get(name))
        form = re_shown or CHOICE_FORM_CLASSES[name](
            initial={**keep.get(name, {}), "seen_version": case.version}
        )
        form.offer(offered)
        form.withheld = [w for w in withheld if w.action in kinds]
        if name in keep and name not in bound:
            # Pre-filled (an accepted suggestion, a choice kept after a conflict): the
            # reason is where the person goes next, to review it.
            form.fields["reason_text"].widget.attrs["autofocus"] = True
        forms[name] = form
    if role in ACTING_ROLES and case.state != CaseState.RESOLVED:
        # Only a supervisor is offered the staff list; others take or release.
        staff: list[str] | None = None if role == Role.SUPERVISOR else []
        forms["assign"] = AssignForm(initial={"seen_version": case.version}, staff=staff)
    return forms


@dataclass(frozen=True)
class _CaseShown:
    """What the request answered with the case page brings to it: forms a refused post
    bound (``bound``), choices kept (``keep``) beside the case that won a conflict
    (``conflict``), a refused note (``note_form``), or the action just applied
    (``after``)."""

    bound: dict[str, Form] | None = None
    keep: dict[str, dict[str, Any]] | None = None
    conflict: Case | None = None
    note_form: NoteForm | None = None
    after: ActionResult | None = None


def _case_response(
    request: StaffRequest,
    case_id: str,
    shown: _CaseShown | None = None,
    *,
    status: int = 200,
    send_messages: bool = False,
) -> HttpResponse:
    """The case page. After an action (``shown.after``) it is built from the case the
    action wrote and the claim and pledge its decider read (consistently, just now) with
    its own writes applied: only what the action did not read is read."""
    shown = shown or _CaseShown()
    bound, keep, after = shown.bound, shown.keep, shown.after
    store = case_store(case_id)  # resolved once for the page's reads
    case = after.case if after is not None else _case_or_404(case_id, store)
    known = after.evidence if isinstance(after, Decided) else None
    read = EvidenceRead(case, store, known)
    suggestion = case_suggestion(case, read.evidence)
    if request.method != "POST" and not bound and not keep:
        keep = _accepted(request, suggestion)
    context = {
        **_live_context(request, case, read, suggestion),
        **_timeline_context(request, case, store, shown.note_form),
        "forms": _forms(case, request.role, bound or {}, keep or {}, read.facts),
        "withheld": _withheld(case, request.role, read.facts),
        "offer_key": _offer_key(case, request.role, read.facts),
        "accepted": bool(keep) and request.method != "POST",
        "queue_slug": SLUG_FOR_QUEUE.get(case.queue or ""),
        "is_mine": case.assignee == request.user.get_username(),
        # With several regions, the one the case (and its claim and pledge) lives in.
        "region": store.region_name if len(every_store()) > 1 else "",
        "conflict": shown.conflict,
        # Messages travel with an htmx answer to a POST as an out-of-band swap.
        "oob_messages": (request.method == "POST" or send_messages) and wants_partial(request),
    }
    return render_page(request, "cases/detail.html", "case", context, status=status)


def _timeline_context(
    request: StaffRequest, case: Case, store: Store, note_form: NoteForm | None
) -> dict[str, object]:
    """The audit timeline with its chain check, and the note form for those who act."""
    timeline = case_timeline(case.case_id, store=store)
    return {
        "timeline": timeline,
        # The case was read before its timeline, so its stored head can only be behind.
        "chain": case_chain_status(
            case.case_id,
            timeline,
            SubjectHead(SubjectKind.CASE, case.audit_seq, case.audit_head),
            store=store,
        ),
        "note_form": note_form or (NoteForm() if request.role in ACTING_ROLES else None),
    }


def _live_context(
    request: StaffRequest, case: Case, read: EvidenceRead, suggestion: Suggestion | None
) -> dict[str, object]:
    """What the parts of the page that follow the evidence need: the banner, the
    suggestion, the evidence panel and the poller."""
    return {
        "case": case,
        "evidence": read.evidence,
        "evidence_error": read.error,
        "suggestion": suggestion,
        "can_act": request.role in ACTING_ROLES,
        "retry_running": retry_in_flight(case),
        "resolution_words": resolution_words(case),
    }


@require_safe
@role_required(*VIEWING_ROLES)
def case_view(request: StaffRequest, case_id: str) -> HttpResponse:
    """The case page. Its poller (present while a commit retry runs in the background)
    gets itself back, re-armed, as long as the retry runs (one read of the case), and the
    whole fresh case, swapped in place of the page's case, once it has ended."""
    htmx = getattr(request, "htmx", None)
    if wants_partial(request) and htmx is not None and htmx.target == POLLER:
        store = case_store(case_id)
        case = _case_or_404(case_id, store)
        if retry_in_flight(case):
            context = {"case": case, "retry_running": True}
            return render_page(request, "cases/detail.html", "live", context)
        # The message of the POST that queued the retry ("will be retried") is replaced.
        if case.is_resolved:
            messages.success(request, "The commit retry has ended: the case is resolved.")
        else:
            messages.warning(
                request,
                "The commit retry has ended without recording the pledge; "
                "see the suggested next step.",
            )
        response = _case_response(request, case_id, send_messages=True)
        response["HX-Retarget"] = "#case"
        response["HX-Reswap"] = "outerHTML"
        return response
    return _case_response(request, case_id)


@require_safe
@role_required(*VIEWING_ROLES)
def case_evidence_view(request: StaffRequest, case_id: str) -> HttpResponse:
    """Fresh consistent reads: for htmx the evidence panel, with the banner, the
    suggestion and the actions that follow it swapped out of band (no timeline read);
    the case page otherwise."""
    if not wants_partial(request):
        return _case_response(request, case_id)
    store = case_store(case_id)
    case = _case_or_404(case_id, store)
    read = EvidenceRead(case, store)
    suggestion = case_suggestion(case, read.evidence)
    offer_key = _offer_key(case, request.role, read.facts)
    context = {
        **_live_context(request, case, read, suggestion),
        "forms": _forms(case, request.role, {}, {}, read.facts),
        "offer_key": offer_key,
        # The page sends the key of the card it shows: unchanged, the card stays as it is.
        "actions_unchanged": request.GET.get("offer") == offer_key,
        "oob": True,
    }
    return render_page(request, "cases/detail.html", "evidence_refresh", context)


def _act(
    request: StaffRequest,
    case_id: str,
    name: str,
    run: Callable[[dict[str, Any], Actor], ActionResult],
    *,
    announce: bool = True,
) -> HttpResponse:
    """Run the action of form ``name``; ``announce``: say its outcome in a message here
    (the caller says it otherwise, as "Record and open the next case" does on the next
    page)."""
    form = FORM_CLASSES[name](request.POST)
    if not form.is_valid():
        messages.error(request, "Nothing was changed: check the highlighted fields.")
        return _case_response(request, case_id, _CaseShown(bound={name: form}), status=400)
    try:
        result = run(form.cleaned_data, actor_for(request))
    except CaseNotFound as exc:
        raise Http404(str(exc)) from exc
    except CaseChanged as exc:
        current = exc.current
        messages.error(
            request,
            f"Not applied: the case was changed by {current.last_actor} at "
            f"{exact(current.last_action_at)}. Its fresh state is shown; review it and act again.",
        )
        keep = {
            k: v for k, v in form.cleaned_data.items() if k not in ("seen_version", "action_id")
        }
        return _case_response(
            request, case_id, _CaseShown(keep={name: keep}, conflict=current), status=409
        )
    except CaseError as exc:
        messages.error(request, f"Not applied: {exc}")
        form.add_error("reason_text" if isinstance(exc, InvalidReason) else None, str(exc))
        return _case_response(
            request, case_id, _CaseShown(bound={name: form}), status=case_refusal_status(exc)
        )
    if announce:
        say = messages.success if result.applied else messages.info
        say(request, result.message)
    if not wants_partial(request):
        return redirect("case", case_id=case_id)
    return _case_response(request, case_id, _CaseShown(after=result))


@require_POST
@role_required(*ACTING_ROLES)
def case_dispose_view(request: StaffRequest, case_id: str) -> HttpResponse:
    recorded: list[tuple[ActionResult, dict[str, Any]]] = []

    def run(data: dict[str, Any], actor: Actor) -> ActionResult:
        result = case_dispose(
            case_id=case_id,
            disposition=data["disposition"],
            staff=staff_action(data, actor),
            store=case_store(case_id),
        )
        recorded.append((result, data))
        return result

    # "Record and open the next case": the button names the queue the case was in. The
    # page that follows is another case's, so it, not this one, says what was recorded.
    queue = Queue.of(request.POST.get("then_next", ""))
    response = _act(request, case_id, "dispose", run, announce=queue is None)
    if not recorded or queue is None:
        return response
    result, data = recorded[0]
    _say_decided(request, result, data)
    return _open_next(request, case_id, queue)


def _say_decided(request: StaffRequest, result: ActionResult, data: dict[str, Any]) -> None:
    """The message the next page shows about the case just decided: which case, what
    was recorded and why, and a link back to it (a person moving on still sees what they
    did, and can return to it)."""
    case = result.case
    url = reverse("case", kwargs={"case_id": case.case_id})
    subject = intent(case.intent_id) if case.intent_id else case.case_id
    text = format_html(
        'Just decided: <a href="{}">{}</a> — {} ({}: “{}”). {}',
        url,
        subject,
        Disposition.words(data["disposition"]),
        ReasonCode.words(data["reason_code"]),
        data["reason_text"],
        result.message,
    )
    say = messages.success if result.applied else messages.info
    say(request, text)


def _open_next(request: StaffRequest, case_id: str, queue: Queue) -> HttpResponse:
    """After a disposition: the next open case of ``queue`` (not this one, nobody
    else's), or the queue page with a word when none is left."""
    following = next_open_case(
        queue, after=case_id, username=request.user.get_username(), stores=every_store()
    )
    if following is None:
        messages.info(request, "No other open case in this queue.")
        slug = SLUG_FOR_QUEUE.get(queue)
        url = reverse("queue", args=[slug]) if slug else reverse("overview")
    else:
        url = reverse("case", kwargs={"case_id": following})
    if wants_partial(request):
        answer = HttpResponse(status=204)
        answer["HX-Redirect"] = url
        return answer
    return redirect(url)


@require_POST
@role_required(*ACTING_ROLES)
def case_override_view(request: StaffRequest, case_id: str) -> HttpResponse:
    def run(data: dict[str, Any], actor: Actor) -> ActionResult:
        result = override_request(
            case_id=case_id,
            override=data["override"],
            staff=staff_action(data, actor),
            store=case_store(case_id),
        )
        if result.applied:
            notify_override_requested(
                case_id=case_id,
                request=result.case.override,
                override=data["override"],
                actor=actor.username,
            )
        return result

    return _act(request, case_id, "override", run)


@require_POST
@role_required(*ACTING_ROLES)
def case_assign_view(request: StaffRequest, case_id: str) -> HttpResponse:
    def run(data: dict[str, Any], actor: Actor) -> ActionResult:
        staff, store = staff_action(data, actor), case_store(case_id)
        if data["unassign"]:
            return case_unassign(case_id=case_id, staff=staff, store=store)
        result = case_assign(
            case_id=case_id, staff=staff, store=store, assignee=data.get("assignee") or None
        )
        if result.applied:
            notify_assigned(case_id=case_id, assignee=result.case.assignee, actor=actor.username)
        return result

    return _act(request, case_id, "assign", run)


@require_POST
@role_required(*ACTING_ROLES)
def case_note_view(request: StaffRequest, case_id: str) -> HttpResponse:
    """A note on the case (``text``): appended to its audit timeline, which htmx swaps
    in place; ``@name`` of active staff notifies them. Bad input writes nothing and
    shows the form again with the text and the reason."""
    form = NoteForm(request.POST)
    status, error = 200, ""
    if not form.is_valid():
        status, error = 400, "the form was incomplete; reload the page and write it again."
    else:
        text = form.cleaned_data["text"]
        actor = actor_for(request)
        # Nobody is told about their own note: the author's own @name stays plain.
        named = mentions_in(text)
        mentions = [name for name in named.notified if name != actor.username]
        try:
            result = case_note_add(
                case_id=case_id,
                text=text,
                staff=StaffAction(actor=actor, action_id=form.cleaned_data["action_id"] or None),
                mentions=mentions,
                store=case_store(case_id),
            )
        except CaseNotFound as exc:
            raise Http404(str(exc)) from exc
        except CaseError as exc:
            status, error = case_refusal_status(exc), str(exc)
        else:
            messages.success(request, result.message)
            if result.applied and named.unknown:
                # Said, not refused: the note stands, and the author learns that a name
                # told nobody (a typo, someone who left) instead of assuming it did.
                unknown = ", ".join(f"@{name}" for name in named.unknown)
                messages.warning(
                    request,
                    f"Nobody was notified for {unknown}: no active colleague has that username.",
                )
            if result.applied and mentions:
                notify_mentions(
                    case_id=case_id, usernames=mentions, note=text, actor=actor.username
                )
    if error:
        messages.error(request, f"Not added: {error}")
        form.add_error("text", error)
    if not wants_partial(request):
        if not error:
            return redirect(reverse("case", kwargs={"case_id": case_id}) + "#timeline")
        return _case_response(request, case_id, _CaseShown(note_form=form), status=status)
    store = case_store(case_id)
    case = _case_or_404(case_id, store)
    context = {
        "case": case,
        "oob_messages": True,
        "timeline_alone": True,  # the messages travel with the timeline
        **_timeline_context(request, case, store, form if error else None),
    }
    return render_page(request, "cases/detail.html", "timeline", context, status=status)
