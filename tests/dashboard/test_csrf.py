"""CSRF is enforced on every unsafe method of every URL, htmx requests included
(the test client skips CSRF checks unless told to enforce them)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from tests.helpers import sign_in

# Bearer-token API: no cookies, so no CSRF; it answers 401 without a token instead.
CSRF_EXEMPT_PREFIXES = ("api/",)
SAMPLE = {
    "case_id": "C-AAAAAAAAAAAAAAAA",
    "queue": "stuck",
    "intent_id": "k",
    "export_id": "e" * 16,
    "fmt": "csv",
    "task_id": "t" * 16,
    "filename": "x.csv",
    "path": "x",
    "notification_id": "1",
    "passkey_id": "1",
    "view_id": "1",
    "endpoint_id": "1",
}


def _paths(resolver: URLResolver = None, prefix: str = "") -> list[str]:
    resolver = resolver or get_resolver()
    out = []
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            out.extend(_paths(entry, route))
        elif isinstance(entry, URLPattern):
            out.append(route)
    return out


def _concrete(route: str) -> str:
    def fill(match: re.Match) -> str:
        name = match.group(2)
        return SAMPLE.get(name, "x")

    path = re.sub(r"<(?:(\w+):)?(\w+)>", fill, route)
    return "/" + path.lstrip("^").rstrip("$")


ROUTES = sorted(
    {r for r in _paths() if not r.startswith(CSRF_EXEMPT_PREFIXES) and not r.startswith("static")}
)


@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_unsafe_methods_without_token_are_403(route, htmx):
    """POST, PUT, PATCH and DELETE without a CSRF token are refused with 403, as a
    signed-in supervisor, with and without HX-Request."""
    client = Client(enforce_csrf_checks=True)
    sign_in(client, "supervisor", username="sue")
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    path = _concrete(route)
    for method in ("post", "put", "patch", "delete"):
        response = getattr(client, method)(path, **headers)
        assert response.status_code == 403, f"{method.upper()} {path}: {response.status_code}"


def test_every_route_is_covered():
    """The list above is built from the URL resolver, so a new URL is covered at once;
    this guards against the walk silently finding nothing."""
    assert "accounts/login/" in ROUTES and "drill/run" in ROUTES
    assert len(ROUTES) >= 6
