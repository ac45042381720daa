"""Staff pages carry case and donor data: every response of a staff view says
``Cache-Control: no-store, private``, so neither the browser nor a shared cache keeps a
copy after sign-out. Static files and ``/healthz`` keep their own caching."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.dashboard.test_role_matrix import MATRIX, REFUSED_PAST_CSRF, World, _sign_in
from tests.dashboard.test_role_matrix import world as world  # the fixture, re-exported

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def _directives(response) -> set[str]:
    return {part.strip() for part in response.get("Cache-Control", "").split(",") if part}


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
@pytest.mark.parametrize("route", sorted(MATRIX))
def test_every_staff_url_is_no_store_private(world: World, client: Client, route, htmx):
    """A supervisor (who may use every staff URL) gets ``no-store`` and ``private`` on
    each page, partial, export and action response."""
    row = MATRIX[route]
    _sign_in(client, "supervisor", world)
    path = row.path(world)
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    if row.method == "GET":
        response = client.get(path, **headers)
    else:
        response = client.post(path, row.data(world), **headers)
    if route.startswith("audit/exports/<"):
        # The matrix names an export that does not exist: Django's 404 page, no data.
        assert response.status_code == 404, (route, response.status_code)
        return
    # A passkey completion with no ceremony begun is refused (400): its answer must not be
    # kept either.
    refused = route in REFUSED_PAST_CSRF
    assert (response.status_code == 400) if refused else (response.status_code < 400), (
        route,
        response.status_code,
    )
    assert {"no-store", "private"} <= _directives(response), (route, response.status_code)


@pytest.mark.parametrize("role", ["finance_staff", "auditor"])
def test_other_roles_get_no_store_too(world: World, client: Client, role):
    """The header does not depend on the role: finance staff and auditors get it on the
    overview, a case page and the audit search."""
    _sign_in(client, role)
    for path in ("/", f"/cases/{world.case_id}/", "/audit/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert {"no-store", "private"} <= _directives(response), path


def test_static_files_and_healthz_are_unaffected(world: World, settings):
    """Static files and the anonymous health probe are not staff pages: no ``no-store``,
    even for a signed-in user."""
    settings.WHITENOISE_USE_FINDERS = True  # serve static/ without collectstatic
    client = Client()
    _sign_in(client, "supervisor")
    static = client.get("/static/css/app.css")
    assert static.status_code == 200
    assert "no-store" not in _directives(static)
    assert "no-store" not in _directives(Client().get("/healthz"))


def test_an_existing_exports_status_page_is_no_store(world: World, client: Client):
    """The status page of a requested background export (the matrix only reaches a
    missing one) is marked too."""
    _sign_in(client, "auditor")
    started = client.post("/audit/exports/", {"format": "csv"})
    assert started.status_code == 302
    response = client.get(started["Location"])
    assert response.status_code == 200, started["Location"]
    assert {"no-store", "private"} <= _directives(response)
