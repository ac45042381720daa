"""``Server-Timing`` on answers to signed-in staff and API callers: how many DynamoDB
round trips the request made and how long its DynamoDB calls took, beside the server's
whole time for the request. Browsers show it in their network panel; the HTTP bench reads
it to count round trips per request inside gunicorn.

    Server-Timing: ddb;desc="2 calls";dur=3.1, app;dur=4.7

Counted by a client hook (``reconciliation.dynamo.calls``) into a tally opened per
request: a context variable and two clock reads, nothing written anywhere. Anonymous
answers (the sign-in page, health checks, refused API calls) carry no timings, so they
tell an outsider nothing about the work behind them.

Calls made in helper threads count too, when the pool is a ``calls.TalliedPool`` (the
audit search reads a day's index shards in one). Not counted: calls made while a
streamed answer is sent (exports), after the header was written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from reconciliation.dynamo import calls

HEADER = "Server-Timing"


def timings_shown(request: HttpRequest) -> bool:
    """The caller proved who it is: a signed-in person, or an API caller whose bearer
    token was accepted. A request whose user was never loaded is nobody's (and is not
    made to read the session now); a request signed out on the way (a missing second
    factor) is judged by the user it ended with, not the one it loaded."""
    if getattr(request, "api_tenant", None):
        return True
    if "_cached_user" not in request.__dict__:
        return False
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class ServerTimingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        with calls.tally() as counted:
            response = self.get_response(request)
        if timings_shown(request):
            total_ms = (time.perf_counter() - started) * 1000
            response[HEADER] = (
                f'ddb;desc="{counted.round_trips} calls";dur={counted.seconds * 1000:.1f}, '
                f"app;dur={total_ms:.1f}"
            )
        return response
