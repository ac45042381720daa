"""Operational endpoints: health JSON and Prometheus metrics."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from reconciliation import metrics
from reconciliation.ops.health import health_check, healthy


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    status = health_check()
    return JsonResponse(status, status=200 if healthy(status) else 503)


@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text; with ``METRICS_TOKEN`` set, only for ``Bearer <token>``."""
    if settings.METRICS_TOKEN and not _bearer_matches(request, settings.METRICS_TOKEN):
        response = HttpResponse(
            "metrics need Authorization: Bearer <METRICS_TOKEN>\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, supplied = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        supplied.strip().encode(), token.encode()
    )
