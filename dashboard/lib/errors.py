"""Error pages: 400, 403 (and the CSRF failure), 404 and 500 inside the site layout,
each saying what the person can do instead; JSON for the machine paths.

Django calls these as ``handler400``/``handler403``/``handler404``/``handler500``
(``dashboard/urls.py``) and ``CSRF_FAILURE_VIEW``. The API, ``/metrics`` and
``/healthz`` are read by programs, so they always answer JSON, never a page.

The 500 page must render whatever broke: Django's own ``server_error`` renders without
the request, and so does our last fallback. It is first tried with the request (so a
signed-in person keeps the navigation), then without any context processor (no
session, no database), then as a fixed string.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseForbidden,
    HttpResponseNotFound,
    HttpResponseServerError,
    JsonResponse,
)
from django.template import loader
from django.utils.html import escape

from dashboard.auth import to_sign_in, user_role
from reconciliation.actors import STAFF_ROLES

logger = logging.getLogger(__name__)

# Paths answered to programs: JSON on every error, never an HTML page.
MACHINE_PREFIXES = ("/api/",)
MACHINE_PATHS = ("/metrics", "/healthz")


def is_machine_path(path: str) -> bool:
    return path.startswith(MACHINE_PREFIXES) or any(
        path == p or path.startswith(p + "/") for p in MACHINE_PATHS
    )


def correlation_id(request: HttpRequest) -> str:
    """The id CorrelationIdMiddleware gave this request (also in ``X-Request-ID``);
    a fresh one when the error came before that middleware ran."""
    found = getattr(request, "correlation_id", "")
    if not found:
        found = str(uuid.uuid4())
        request.correlation_id = found  # type: ignore[attr-defined]
    return found


def _json(request: HttpRequest, status: int, code: str, detail: str) -> JsonResponse:
    ref = correlation_id(request)
    response = JsonResponse({"error": code, "detail": detail, "correlation_id": ref}, status=status)
    response["X-Request-ID"] = ref
    return response


def _page(request: HttpRequest, template: str, context: Mapping[str, object]) -> str:
    """``template`` with the request's context (navigation for a signed-in person); when
    that fails (the session store or database is down), without it."""
    context = {"correlation_id": correlation_id(request), "path": request.path, **context}
    try:
        return loader.render_to_string(template, context, request=request)
    except Exception:
        logger.exception("error page %s rendered without the request context", template)
        return loader.render_to_string(template, context)


def _finish(response: HttpResponse, request: HttpRequest) -> HttpResponse:
    response["X-Request-ID"] = correlation_id(request)
    # An error page says nothing worth keeping, and may follow a signed-in page.
    response["Cache-Control"] = "no-store, private"
    return response


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_machine_path(request.path):
        return _json(request, 400, "bad_request", "The request could not be understood.")
    html = _page(request, "400.html", {})
    return _finish(HttpResponseBadRequest(html), request)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_machine_path(request.path):
        return _json(request, 403, "forbidden", "Not allowed for this caller.")
    user = getattr(request, "user", None)
    if user is not None and not user.is_authenticated:
        # Signed out: the way in is the sign-in page, never a refusal.
        return to_sign_in(request)
    admitted = set(getattr(exception, "roles", ()) or ())
    roles = [str(r).replace("_", " ") for r in STAFF_ROLES if r in admitted]
    mine = user_role(user)
    context = {"admitted_roles": roles, "your_role": str(mine).replace("_", " ") if mine else ""}
    html = _page(request, "403.html", context)
    return _finish(HttpResponseForbidden(html), request)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_machine_path(request.path):
        return _json(request, 404, "not_found", "No such resource.")
    looked_for = ""
    parts = [p for p in request.path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "cases":
        looked_for = parts[1]  # a case id someone typed or was sent
    html = _page(request, "404.html", {"looked_for": looked_for})
    return _finish(HttpResponseNotFound(html), request)


FALLBACK_500 = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Something went wrong · Pledge
reconciliation</title><link rel="stylesheet" href="/static/css/app.css"></head><body>
<header class="topbar"><a class="brand" href="/">Pledge reconciliation</a></header>
<main id="main"><h1>Something went wrong on our side</h1><section class="card">
<p>Nothing you did caused this. <a href="/">Go to the overview</a> and try again in a
moment.</p><p>If it keeps happening, tell support this reference:
<code class="mono">{ref}</code></p></section></main></body></html>"""


def server_error(request: HttpRequest) -> HttpResponse:
    ref = correlation_id(request)
    logger.error("server error on %s, correlation id %s", request.path, ref)
    if is_machine_path(request.path):
        return _json(request, 500, "internal_error", "Something went wrong on our side.")
    try:
        html = _page(request, "500.html", {})
    except Exception:
        logger.exception("the 500 page failed to render; answering the fixed page")
        html = FALLBACK_500.format(ref=escape(ref))
    return _finish(HttpResponseServerError(html), request)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: the form was older than the session, or came from
    elsewhere. Still a 403, in the layout, saying how to go on."""
    if is_machine_path(request.path):
        return _json(request, 403, "csrf_failed", "The CSRF check failed.")
    logger.warning("CSRF failure on %s: %s", request.path, reason)
    html = _page(request, "403_csrf.html", {})
    return _finish(HttpResponseForbidden(html), request)
