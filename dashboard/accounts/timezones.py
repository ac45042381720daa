"""The time zone pages show times in: each staff member's own (``StaffProfile.time_zone``,
set on the profile page), activated for every request they make; ``settings.TIME_ZONE``
(UTC) for everyone else. Stored times stay UTC; only their display moves."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from dashboard.accounts.models import StaffProfile

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


@cache
def zone_names() -> tuple[str, ...]:
    """Every IANA zone name this machine knows, sorted, ``UTC`` first."""
    legacy = ("Etc/", "posix/", "right/", "SystemV/")
    names = (n for n in available_timezones() if "/" in n and not n.startswith(legacy))
    return ("UTC", *sorted(names))


def is_zone(name: object) -> bool:
    return isinstance(name, str) and name in zone_names()


def default_zone() -> str:
    return settings.TIME_ZONE or "UTC"


def zone_of(user: User | AnonymousUser | None) -> str:
    """The zone ``user`` chose, or the default (no profile yet, or a name this machine
    no longer knows)."""
    if user is None or not user.is_authenticated:
        return default_zone()
    name = StaffProfile.objects.filter(user=user).values_list("time_zone", flat=True).first()
    return name if isinstance(name, str) and is_zone(name) else default_zone()


def zone_set(user: User, name: str) -> None:
    """Store ``name`` (already validated) as ``user``'s zone."""
    StaffProfile.objects.update_or_create(user=user, defaults={"time_zone": name})


def activate(name: str) -> None:
    try:
        timezone.activate(ZoneInfo(name))
    except (ZoneInfoNotFoundError, ValueError):
        timezone.deactivate()


class TimeZoneMiddleware:
    """Activates the signed-in person's zone for the request (one indexed read of their
    profile), so the time filters render their local time."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        activate(zone_of(getattr(request, "user", None)))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
