"""A task the queue (Redis) did not take answers a clear 503 page, never a 500."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.deprecation import MiddlewareMixin

from reconciliation.audit.tasks import BackgroundUnavailable


class BackgroundUnavailableMiddleware(MiddlewareMixin):
    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, BackgroundUnavailable):
            context = {"message": str(exception)}
            return render(request, "background_unavailable.html", context, status=503)
        return None
