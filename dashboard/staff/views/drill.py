"""The Drill page: the last reconciliation drill's table and a button to run it again."""

from __future__ import annotations

from typing import Any

from celery.result import AsyncResult
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, role_required
from reconciliation.actors import Role
from reconciliation.audit.tasks import QUEUE_ERRORS, UNAVAILABLE
from reconciliation.ops.drill import drill_last
from reconciliation.ops.tasks import drill_task

SESSION_KEY = "drill_task_id"


@require_safe
@role_required(Role.SUPERVISOR)
def drill_page(request: StaffRequest) -> HttpResponse:
    """The report says whether a drill runs, ended badly or cannot be known: inside the
    report its polling replaces, so no notice outside it outlives the run."""
    task_id = request.session.get(SESSION_KEY)
    running = False
    notice = ""
    if task_id:
        result: AsyncResult[dict[str, Any]] = AsyncResult(task_id)
        try:
            running = not result.ready()
            failed = not running and result.failed()
        except QUEUE_ERRORS:
            # One bounded read; the drill's state is unknown until Redis answers again.
            running = failed = False
            notice = "Background work is unavailable; the drill's state is unknown."
        else:
            if not running:
                del request.session[SESSION_KEY]
            if failed:
                notice = "The drill could not run to the end; see the worker log."
    context = {"last": drill_last(), "running": running, "notice": notice}
    # Only the report's own polling swaps in the fragment; any other request, htmx or
    # not (a redirect after the button, a boosted link), gets the whole page.
    polling = bool(request.htmx) and request.htmx.target == "drill-report"
    template = "drill.html#report" if polling else "drill.html"
    return render(request, template, context)


@require_POST
@role_required(Role.SUPERVISOR)
def drill_start(request: StaffRequest) -> HttpResponse:
    try:
        result = drill_task.delay()
    except QUEUE_ERRORS:
        messages.error(request, UNAVAILABLE)
        return redirect("drill")
    # The report says it runs, and stops saying so when it is done.
    request.session[SESSION_KEY] = result.id
    return redirect("drill")
