"""DynamoDB unreachable: staff pages answer a clear 503, never the generic 500.

The API says 503 with ``Retry-After`` when the store cannot be reached, and ``/healthz``
names the cause; a staff page met the same connection error or timeout as an unhandled
exception, so a person saw "Something went wrong". A view that reads the case store
lets these errors rise; this middleware turns them into one page that says what is
down and when to try again (``docs/security.md``, "When the case store is down").
"""

from __future__ import annotations

import logging
import math

from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control
from django.utils.deprecation import MiddlewareMixin

from dashboard.lib.errors import _json, _page, correlation_id, is_machine_path
from reconciliation.dynamo.retry import RetriesExhausted

logger = logging.getLogger(__name__)

# No connection, no answer in time, or every retry within the request's budget refused
# (throttled, internal error): the store is away or swamped, not this request wrong.
STORE_UNREACHABLE = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ReadTimeoutError,
    ConnectionClosedError,
    RetriesExhausted,
)


def retry_after_s() -> int:
    """Seconds before trying again: a few times the longest backoff of one request."""
    return max(5, math.ceil(settings.DDB_APP_RETRY_CAP_S * 10))


class StoreUnavailableMiddleware(MiddlewareMixin):
    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, STORE_UNREACHABLE):
            return None
        logger.warning(
            "case store unreachable on %s (%s), correlation id %s",
            request.path,
            exception.__class__.__name__,
            correlation_id(request),
        )
        response: HttpResponse
        if is_machine_path(request.path):
            response = _json(request, 503, "dynamodb_unavailable", "DynamoDB could not be reached.")
        else:
            html = _page(request, "store_unavailable.html", {"retry_after": retry_after_s()})
            response = HttpResponse(html, status=503)
            response["X-Request-ID"] = correlation_id(request)
        response["Retry-After"] = str(retry_after_s())
        patch_cache_control(response, no_store=True, private=True)
        return response
