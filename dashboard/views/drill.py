"""The Drill page: the last reconciliation drill's table and a button to run it again."""

from __future__ import annotations

from celery.result import AsyncResult
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from kombu.exceptions import OperationalError

from dashboard.auth import role_required
from reconciliation.actors import Role
from reconciliation.services.drill import drill_last
from reconciliation.tasks.drill import drill_task

SESSION_KEY = "drill_task_id"


@require_GET
@role_required(Role.SUPERVISOR)
def drill_page(request: HttpRequest) -> HttpResponse:
    task_id = request.session.get(SESSION_KEY)
    running = False
    if task_id:
        result = AsyncResult(task_id)
        running = not result.ready()
        if not running:
            del request.session[SESSION_KEY]
            if result.failed():
                messages.error(request, "The drill could not run to the end; see the worker log.")
    context = {"last": drill_last(), "running": running}
    template = "drill.html#report" if request.htmx else "drill.html"
    return render(request, template, context)


@require_POST
@role_required(Role.SUPERVISOR)
def drill_start(request: HttpRequest) -> HttpResponse:
    try:
        result = drill_task.delay()
    except OperationalError:
        messages.error(request, "The task queue (Redis) is unreachable; the drill did not start.")
        return redirect("drill")
    request.session[SESSION_KEY] = result.id
    messages.success(request, "The drill is running; this page updates when it is done.")
    return redirect("drill")
