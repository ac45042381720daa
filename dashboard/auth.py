"""Who is asking: Django groups mapped to domain roles, and the actor for audit events.

Every view states the roles it admits with :func:`role_required`; anonymous users are
sent to sign in, signed-in users without one of the three groups get 403, and what the
others get is marked ``Cache-Control: no-store, private``. The domain
services check again (they take the actor and refuse what the role may not do).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.signals import user_logged_in
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import resolve_url
from django.utils.cache import patch_cache_control

from reconciliation.actors import STAFF_ROLES, Actor, Role, staff_role

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import User
    from django_htmx.middleware import HtmxDetails

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
# Paths that never read the session's user: the intake API (bearer tokens) and probes.
UNGATED_PATHS = ("/api/", "/healthz", "/metrics", "/static/")

# What a user's ``_pledge_role`` holds when the role must be looked up again.
ROLE_UNSET = "unset"


class CorrelatedRequest(HttpRequest):
    """A request as it reaches the views, for the type checker only: the middleware
    sets ``correlation_id`` (CorrelationIdMiddleware) and ``htmx`` (django-htmx)."""

    correlation_id: str
    htmx: HtmxDetails


class StaffRequest(CorrelatedRequest):
    """A request a :func:`role_required` view receives: it also carries ``role``, and its
    user is signed in."""

    role: Role
    user: User


def user_role(user: Any) -> Role | None:
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    cached = getattr(user, "_pledge_role", ROLE_UNSET)
    if cached is None or isinstance(cached, Role):
        return cached
    role = staff_role(user.groups.values_list("name", flat=True))
    user._pledge_role = role
    return role


def forget_role(user: Any) -> None:
    """Make :func:`user_role` look the role up again (its groups changed)."""
    user._pledge_role = ROLE_UNSET


def actor_for(request: HttpRequest) -> Actor:
    """The signed-in person making ``request``, for the audit trail; 403 without a role."""
    role = user_role(request.user)
    if role is None:
        raise PermissionDenied
    return actor_for_user(request, request.user, role=role)


def actor_for_user(request: HttpRequest | None, user: Any, *, role: Role) -> Actor:
    """``user`` acting in ``role`` through ``request``, which may be none or may not (yet,
    or any more) carry them: a sign-in, a sign-out. The one place an actor is made for a
    person; :func:`actor_for` for the signed-in one."""
    return Actor(
        username=user.get_username(),
        email=getattr(user, "email", "") or "",
        role=role,
        address=(client_address(request) if request is not None else None) or "",
        correlation_id=getattr(request, "correlation_id", "") or str(uuid.uuid4()),
    )


def client_address(request: HttpRequest) -> str | None:
    """The address of the client, for the sign-in lockout (``AXES_CLIENT_IP_CALLABLE``)
    and audit events.

    ``REMOTE_ADDR``, unless ``TRUSTED_PROXY_COUNT`` says that many proxies of ours stand
    in front of Django, each appending the address it received from to
    ``X-Forwarded-For``: then the client is the entry the outermost of them added, the
    N-th from the right. Entries further left are whatever the client sent and are
    never trusted, else anyone could pick the address a lockout keys on. A header with
    fewer entries than proxies, or a malformed entry, did not come through the chain:
    ``REMOTE_ADDR`` then.
    """
    meta = getattr(request, "META", {})
    remote = meta.get("REMOTE_ADDR")
    count = settings.TRUSTED_PROXY_COUNT
    forwarded = meta.get("HTTP_X_FORWARDED_FOR", "")
    if count <= 0 or not forwarded:
        return remote
    entries = [entry.strip() for entry in forwarded.split(",")]
    if len(entries) < count:
        return remote
    try:
        return str(ipaddress.ip_address(entries[-count]))
    except ValueError:
        return remote


class RoleRefused(PermissionDenied):
    """A signed-in person whose role the page does not admit (:func:`role_required`)."""

    def __init__(self, roles: set[Role]):
        super().__init__("This page is for another role.")
        self.roles = roles


# A view as URLconfs take it, once role_required has wrapped it.
View = Callable[..., HttpResponseBase]


def role_required(*roles: Role) -> Callable[[View], View]:
    """Admit signed-in users whose role is one of ``roles`` (default: any staff role)."""
    allowed = set(roles or STAFF_ROLES)

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: StaffRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            role = user_role(request.user)
            if role is None or role not in allowed:
                # Answered by the 403 page in the layout (dashboard/lib/errors.py),
                # which names the roles this page admits.
                raise RoleRefused(allowed)
            request.role = role
            response = view(request, *args, **kwargs)
            # Staff pages, partials and exports carry case and donor data: neither the
            # browser (back button after sign-out) nor a shared cache may keep a copy.
            patch_cache_control(response, no_store=True, private=True)
            return response

        # read by the role × action matrix test; mypy has no notion of function attributes
        wrapped.allowed_roles = allowed  # type: ignore[attr-defined]
        return wrapped

    return decorator


class CorrelationIdMiddleware:
    """One correlation id per request, shared by every audit event it causes."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: CorrelatedRequest) -> HttpResponse:
        supplied = request.headers.get("X-Request-ID", "")
        request.correlation_id = supplied if REQUEST_ID_RE.match(supplied) else str(uuid.uuid4())
        response = self.get_response(request)
        response["X-Request-ID"] = request.correlation_id
        return response


def role_context(request: HttpRequest) -> dict[str, str]:
    role = user_role(getattr(request, "user", None))
    return {"user_role": str(role) if role else ""}


class SessionTimeoutMiddleware:
    """Idle and absolute session timeouts for staff sessions.

    The absolute limit counts from sign-in (``SESSION_COOKIE_AGE``); the idle limit from
    the last request (``SESSION_IDLE_TIMEOUT_S``). The last-seen time is written at most
    once a minute, so a busy page does not write the session on every request.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session"):
            now = int(time.time())
            started = request.session.get(SESSION_STARTED)
            seen = request.session.get(SESSION_SEEN, started)
            if started is None:
                request.session[SESSION_STARTED] = request.session[SESSION_SEEN] = now
            elif (
                now - started > settings.SESSION_COOKIE_AGE
                or now - (seen or started) > settings.SESSION_IDLE_TIMEOUT_S
            ):
                logout(request)
                return to_sign_in(request)
            elif now - (seen or 0) >= 60:
                request.session[SESSION_SEEN] = now
        return self.get_response(request)


SESSION_STARTED = "auth_started_at"
SESSION_SEEN = "auth_seen_at"


def to_sign_in(request: HttpRequest) -> HttpResponse:
    if getattr(request, "htmx", False):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = resolve_url(settings.LOGIN_URL)
        return response
    return redirect_to_login(request.get_full_path())


@receiver(user_logged_in)
def _mark_sign_in(
    sender: type[AbstractBaseUser],
    request: HttpRequest | None,
    user: AbstractBaseUser,
    **kwargs: object,
) -> None:
    if request is not None and hasattr(request, "session"):
        now = int(time.time())
        request.session[SESSION_STARTED] = request.session[SESSION_SEEN] = now
