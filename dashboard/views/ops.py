"""Operational endpoints: health JSON and Prometheus metrics."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from reconciliation import metrics
from reconciliation.health import health_check


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    status = health_check()
    healthy = all(value == "ok" for value in status.values())
    return JsonResponse(status, status=200 if healthy else 503)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)
