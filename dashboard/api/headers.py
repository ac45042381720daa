"""Every answer of the intake API says ``Cache-Control: no-store`` (docs/security.md).

A pledge, a replay, a refusal or a 503 carries a donor reference or says what the store
holds at this moment: no browser, proxy or CDN may keep a copy and answer it later. The
middleware is the outermost, so answers made by other middleware (a redirect, a 500)
carry the header too.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.cache import patch_cache_control

API_PREFIX = "/api/"


class ApiNoStoreMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.path.startswith(API_PREFIX):
            patch_cache_control(response, no_store=True)
        return response
