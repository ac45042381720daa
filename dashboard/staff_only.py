"""Middleware only the staff pages need, skipped on the intake API (``/api/``).

An API request is a bearer token and a JSON body: no cookie, no session, no signed-in
person, no messages, no time zone to render in, no htmx, no second factor. Run for it
anyway, this middleware cost about a third of Django's own CPU on an intake request
(the session and the anonymous user loaded to find nobody signed in, a message store, a
time zone activated, the idle-timeout, second-factor and staff-session checks) and
made every API answer ``Vary: Cookie``. Each class here stands at its wrapped
middleware's place in ``settings.MIDDLEWARE``: on ``/api/`` the request goes straight on
to the next one; anywhere else the wrapped middleware runs as before, its
``process_view``, ``process_exception`` and ``process_template_response`` hooks too.
Each is a subclass of the one it wraps, so Django's checks that look for a middleware
by its class (the admin's: sessions, auth, messages) still find it.

Left running on ``/api/``: no-store, the security headers (HSTS, nosniff, referrer and
opener policy, X-Frame-Options, CSP), the host check (``CommonMiddleware``), CSRF (the
API's views are exempt; the deploy check looks for the middleware by name, and it costs
a cookie lookup), ``Server-Timing``, the store-unavailable 503, the correlation id and
axes (looked for by name too; it only reads an attribute after the view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import AuthenticationMiddleware as _Auth
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.contrib.sessions.middleware import SessionMiddleware as _Sessions
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django_htmx.middleware import HtmxMiddleware as _Htmx
from django_otp.middleware import OTPMiddleware as _OTP
from whitenoise.middleware import WhiteNoiseMiddleware as _WhiteNoise

from dashboard.accounts.mfa import SecondFactorMiddleware as _SecondFactor
from dashboard.accounts.staff_sessions import StaffSessionMiddleware as _StaffSessions
from dashboard.accounts.timezones import TimeZoneMiddleware as _TimeZone
from dashboard.api.headers import API_PREFIX
from dashboard.auth import SessionTimeoutMiddleware as _SessionTimeout
from dashboard.staff.background import BackgroundUnavailableMiddleware as _Background

_HOOKS = ("process_view", "process_exception", "process_template_response")


def _skipped_on_api(hook: Callable[..., Any]) -> Callable[..., Any]:
    def run(request: HttpRequest, *args: Any) -> Any:
        if request.path_info.startswith(API_PREFIX):
            return None
        return hook(request, *args)

    return run


class StaffOnly:
    """Runs ``wrapped`` (the middleware class this one also derives from) except on
    ``/api/`` requests."""

    wrapped: type

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.inner = self.wrapped(get_response)
        for hook in _HOOKS:
            if hasattr(self.inner, hook):
                setattr(self, hook, _skipped_on_api(getattr(self.inner, hook)))

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        response: HttpResponseBase = self.inner(request)
        return response


def staff_only(wrapped: type) -> type[StaffOnly]:
    return type(wrapped.__name__, (StaffOnly, wrapped), {"wrapped": wrapped})


WhiteNoiseMiddleware = staff_only(_WhiteNoise)
SessionMiddleware = staff_only(_Sessions)
AuthenticationMiddleware = staff_only(_Auth)
TimeZoneMiddleware = staff_only(_TimeZone)
OTPMiddleware = staff_only(_OTP)
MessageMiddleware = staff_only(_Messages)
HtmxMiddleware = staff_only(_Htmx)
BackgroundUnavailableMiddleware = staff_only(_Background)
SessionTimeoutMiddleware = staff_only(_SessionTimeout)
SecondFactorMiddleware = staff_only(_SecondFactor)
StaffSessionMiddleware = staff_only(_StaffSessions)
