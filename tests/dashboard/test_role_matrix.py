"""The role × action matrix (docs/design.md §6): for anonymous, signed-in without a group,
finance_staff, supervisor and auditor, the status every view and action answers. The
table must cover every URL the resolver knows (a new URL without a row fails), and every
POST needs its CSRF token, htmx requests included.

Authorisation does not depend on the DynamoDB engine, so the (wide) matrix runs on moto.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django_otp.oath import totp

from dashboard.accounts import mfa
from reconciliation.casework.overrides import override_request
from tests.helpers import TablesSnapshot, acting, sign_in, staff_user
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

ROLES = ("anonymous", "no_group", "finance_staff", "supervisor", "auditor")
LOGIN = "login"  # a redirect to the sign-in page
# Outside the staff screens: sign-in itself, the bearer-token API, probes, static files,
# and the administration screen (superusers only; every role's 403 in test_admin.py).
EXEMPT = (
    "accounts/login/",
    "accounts/logout/",
    "api/",
    "healthz",
    "metrics",
    "static",
    "favicon.ico",
    "admin/",
    "^admin/",  # the old admin addresses' redirect (test_admin.py), a regex route
)
WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "Role matrix reason text."}


def viewers(ok: int) -> dict:
    """Every staff role may look: the three roles get ``ok``."""
    return dict(anonymous=LOGIN, no_group=403, finance_staff=ok, supervisor=ok, auditor=ok)


def actors(ok: int) -> dict:
    """Finance staff and supervisors act; auditors read only."""
    return {**viewers(ok), "auditor": 403}


def supervisors(ok: int) -> dict:
    """Supervisors only."""
    return {**viewers(ok), "finance_staff": 403, "auditor": 403}


@dataclass
class World:
    """What a request needs: a stuck case, and one awaiting approval raised by ada."""

    case_id: str
    pending_id: str
    request_id: str
    username: str | None = None  # who the test signed in as
    case_key: str = ""  # the client key (tenant acme) of the stuck case


def _world() -> World:
    """Build the world through the services (intake, sweep, an override request)."""
    case_key = f"rm-{uuid.uuid4().hex[:8]}"
    case = stuck_case(case_key)
    pending = stuck_case(f"rm-{uuid.uuid4().hex[:8]}")
    result = override_request(
        override="RELEASE_CLAIM", **acting("ada").on(pending, action_id="req", **WHY)
    )
    staff_user("rm-target", "finance_staff", email="t@example.org")
    return World(case.case_id, pending.case_id, result.case.override.request_id, case_key=case_key)


# Every matrix user has this password: replacing an authenticator and resetting a
# colleague's ask for it with a current code (docs/security.md).
MATRIX_PASSWORD = "Role-matrix-pass-42"


def _code_now(device) -> str:
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift + 1)
    return f"{value:06d}"


def _app_code(w: World, *, pending: bool) -> dict:
    """A good code from the signed-in user's app: for the authenticator being enrolled
    (with the password and the current app's code when one is enrolled: a replacement),
    or (one step ahead, unspent) for the enrolled one; nothing for those without."""
    user = User.objects.filter(username=w.username).first()
    if user is None:
        return {}
    current = mfa.authenticator(user)
    device = mfa.pending_authenticator(user) if pending else current
    if device is None:
        return {"recovery-otp_token": "000000"}
    token = _code_now(device)
    if not pending:
        return {"recovery-otp_token": token}
    if current is None:
        return {"otp_token": token}
    return {"otp_token": token, "password": MATRIX_PASSWORD, "current_token": _code_now(current)}


def _reset_form(w: World) -> dict:
    """A reset confirmed with the signed-in supervisor's own password and code."""
    user = User.objects.filter(username=w.username).first()
    current = mfa.authenticator(user) if user else None
    form = {"reason_text": "Role matrix reset reason.", "password": MATRIX_PASSWORD}
    return {**form, "current_token": _code_now(current)} if current else form


def _own_passkey(action: str) -> Callable[[World], str]:
    """A passkey of the signed-in person (created here), or an id nobody has."""

    def path(w: World) -> str:
        from django_otp_webauthn.models import WebAuthnCredential

        user = User.objects.filter(username=w.username).first() if w.username else None
        passkey_id = 999999
        if user is not None:
            passkey_id = WebAuthnCredential.objects.create(
                user=user, name="matrix", credential_id=uuid.uuid4().bytes, public_key=b"k"
            ).pk
        return f"/accounts/profile/passkeys/{passkey_id}/{action}/"

    return path


def _passkey_remove_form(w: World) -> dict:
    """The password and a current code of the signed-in person."""
    user = User.objects.filter(username=w.username).first() if w.username else None
    current = mfa.authenticator(user) if user else None
    form = {"password": MATRIX_PASSWORD}
    return {**form, "current_token": _code_now(current)} if current else form


@dataclass(frozen=True)
class Row:
    method: str
    expected: dict
    path: Callable[[World], str]
    data: Callable[[World], dict] = lambda w: {}


def _case(suffix: str = "") -> Callable[[World], str]:
    return lambda w: f"/cases/{w.case_id}/{suffix}"


def _pending(suffix: str) -> Callable[[World], str]:
    return lambda w: f"/cases/{w.pending_id}/{suffix}"


def _decision(w: World) -> dict:
    return {"request_id": w.request_id, "action_id": str(uuid.uuid4()), **WHY}


def _disposition(w: World) -> dict:
    return {"disposition": "ESCALATE", "seen_version": 1, "action_id": str(uuid.uuid4()), **WHY}


def _redeliver(w: World) -> dict:
    """A delivery the pledge does not have: refused (nothing changes), back to its page."""
    return {
        "tenant": "acme",
        "key": w.case_key,
        "delivery": "E999/pledge.recorded",
        "seen_attempts": 1,
        "seen_status": "GAVE_UP",
        "seen_audit_seq": 1,
        "action_id": str(uuid.uuid4()),
        **WHY,
    }


def _endpoint(suffix: str = "") -> Callable[[World], str]:
    """A page of the tenant's one acknowledgement endpoint (registered on first use)."""

    def path(w: World) -> str:
        from dashboard.tenancy.models import WebhookEndpoint
        from dashboard.tenancy.tenant_changes import webhook_register
        from reconciliation.actors import command_actor

        endpoint = WebhookEndpoint.objects.first() or webhook_register(
            "acme",
            "https://crm.example.org/h",
            events=("pledge.recorded",),
            actor=command_actor("m"),
        )
        return f"/acks/{endpoint.pk}/{suffix}"

    return path


def _resend_preview(w: World) -> dict:
    """A preview: reads, writes nothing."""
    return {"step": "preview", "since": "2026-01-01T00:00"}


def _override(w: World) -> dict:
    return {
        "override": "RELEASE_CLAIM",
        "seen_version": 1,
        "action_id": str(uuid.uuid4()),
        **WHY,
    }


def _bulk(w: World) -> dict:
    return {
        "case_ids": [w.case_id],
        "disposition": "ESCALATE",
        "step": "preview",
        "queue": "stuck",
        "action_id": str(uuid.uuid4()),
        **WHY,
    }


def _own_notification(w: World) -> str:
    """A notification of the signed-in user (none signed in: an id nobody has)."""
    from dashboard.staff.models import Notification, NotificationKind

    user = User.objects.filter(username=w.username).first()
    if user is None:
        return "/notifications/999999/"
    mine = Notification.objects.create(
        recipient=user, kind=NotificationKind.MENTION, case_id=w.case_id, actor="x", action=""
    )
    return f"/notifications/{mine.pk}/"


def _own_view(w: World) -> str:
    """The delete URL of a saved view owned by the signed-in user (by rm-target when
    nobody is signed in: the request is refused before the view is looked up)."""
    from dashboard.staff.models import SavedView

    owner = User.objects.filter(username=w.username).first() or User.objects.get(
        username="rm-target"
    )
    view = SavedView.objects.create(user=owner, name=f"v-{uuid.uuid4().hex[:8]}", query="")
    return f"/worklist/views/{view.id}/delete/"


def _fund(w: World) -> dict:
    """A fund of a tenant that exists (the world's cases do not make one)."""
    from dashboard.tenancy.models import Tenant

    Tenant.objects.provision("acme")
    return {"tenant": "acme", "code": "GENERAL", "currency": "USD", "max_amount": "900"}


NO_EXPORT = "e" * 16
# route (as the resolver spells it) → the request and the status per role.
MATRIX: dict[str, Row] = {
    "": Row("GET", viewers(200), lambda w: "/"),
    "queues/<str:queue>/": Row("GET", viewers(200), lambda w: "/queues/stuck/"),
    "queues/resolved/": Row("GET", viewers(200), lambda w: "/queues/resolved/"),
    "queues/mine/": Row("GET", actors(200), lambda w: "/queues/mine/"),
    "cases/": Row("GET", viewers(200), lambda w: "/cases/?q=acme%23rm-1"),
    "cases/<case_id:case_id>/": Row("GET", viewers(200), _case()),
    "pledges/": Row("GET", viewers(200), lambda w: f"/pledges/?tenant=acme&key={w.case_key}"),
    "pledges/<str:tenant>/<path:key>/": Row(
        "GET", viewers(200), lambda w: f"/pledges/acme/{w.case_key}/"
    ),
    "requests/rejected/": Row("GET", viewers(200), lambda w: "/requests/rejected/"),
    "acks/": Row("GET", viewers(200), lambda w: "/acks/"),
    "acks/redeliver/": Row("POST", actors(302), lambda w: "/acks/redeliver/", _redeliver),
    "acks/<int:endpoint_id>/": Row("GET", viewers(200), _endpoint()),
    "acks/<int:endpoint_id>/resend/": Row(
        "POST", supervisors(200), _endpoint("resend/"), _resend_preview
    ),
    "cases/<case_id:case_id>/evidence/": Row("GET", viewers(200), _case("evidence/")),
    "cases/<case_id:case_id>/dispose/": Row("POST", actors(302), _case("dispose/"), _disposition),
    "cases/<case_id:case_id>/override/": Row("POST", actors(302), _case("override/"), _override),
    "cases/<case_id:case_id>/assign/": Row(
        "POST", actors(302), _case("assign/"), lambda w: {"seen_version": 1, "action_id": "a1"}
    ),
    "cases/bulk/": Row("POST", actors(200), lambda w: "/cases/bulk/", _bulk),
    "cases/<case_id:case_id>/approve/": Row(
        "POST", supervisors(302), _pending("approve/"), _decision
    ),
    "cases/<case_id:case_id>/reject/": Row(
        "POST", supervisors(302), _pending("reject/"), _decision
    ),
    "cases/<case_id:case_id>/notes/": Row(
        "POST", actors(302), _case("notes/"), lambda w: {"text": "Role matrix note."}
    ),
    "approvals/": Row("GET", supervisors(200), lambda w: "/approvals/"),
    "funds/": Row("GET", {**viewers(200), "finance_staff": 403}, lambda w: "/funds/"),
    "funds/set/": Row(
        "POST",
        supervisors(302),
        lambda w: "/funds/set/",
        _fund,
    ),
    "notifications/": Row("GET", viewers(200), lambda w: "/notifications/"),
    # One of the signed-in person's own (another's is a 404: test_notifications.py).
    "notifications/<int:notification_id>/": Row("GET", viewers(302), _own_notification),
    "notifications/read-all/": Row("POST", viewers(302), lambda w: "/notifications/read-all/"),
    "audit/": Row("GET", viewers(200), lambda w: "/audit/"),
    "audit/export.csv": Row("GET", viewers(200), lambda w: "/audit/export.csv"),
    "audit/export.jsonl": Row("GET", viewers(200), lambda w: "/audit/export.jsonl"),
    "audit/exports/": Row(
        "POST", viewers(302), lambda w: "/audit/exports/", lambda w: {"format": "csv"}
    ),
    "audit/exports/<str:export_id>/": Row(
        "GET", viewers(404), lambda w: f"/audit/exports/{NO_EXPORT}/"
    ),
    "audit/exports/<str:export_id>/download": Row(
        "GET", viewers(404), lambda w: f"/audit/exports/{NO_EXPORT}/download"
    ),
    "audit/exports/<str:export_id>/manifest.json": Row(
        "GET", viewers(404), lambda w: f"/audit/exports/{NO_EXPORT}/manifest.json"
    ),
    "accounts/profile/": Row("GET", viewers(200), lambda w: "/accounts/profile/"),
    "accounts/profile/authenticator/": Row(
        "POST",
        viewers(200),
        lambda w: "/accounts/profile/authenticator/",
        lambda w: _app_code(w, pending=True),
    ),
    "accounts/profile/recovery-codes/": Row(
        "POST",
        {**viewers(200), "finance_staff": 400},  # enrolled no authenticator: nothing to show
        lambda w: "/accounts/profile/recovery-codes/",
        lambda w: _app_code(w, pending=False),
    ),
    "accounts/profile/time-zone/": Row(
        "POST",
        viewers(200),
        lambda w: "/accounts/profile/time-zone/",
        lambda w: {"time_zone": "Europe/Berlin"},
    ),
    "accounts/profile/passkeys/begin/": Row(
        "POST",
        {**viewers(200), "finance_staff": 403},  # supervisors and auditors: the options
        lambda w: "/accounts/profile/passkeys/begin/",
    ),
    "accounts/profile/passkeys/complete/": Row(
        "POST",
        {**viewers(400), "finance_staff": 403},  # no ceremony begun: nothing to complete
        lambda w: "/accounts/profile/passkeys/complete/",
    ),
    "accounts/profile/password/": Row(
        "POST",
        viewers(200),
        lambda w: "/accounts/profile/password/",
        lambda w: {
            "current_password": MATRIX_PASSWORD,
            "new_password1": "Role-matrix-new-43",
            "new_password2": "Role-matrix-new-43",
        },
    ),
    "accounts/profile/passkeys/<int:passkey_id>/rename/": Row(
        "POST",
        {**viewers(200), "finance_staff": 403},  # one's own passkey: supervisors, auditors
        _own_passkey("rename"),
        lambda w: {"name": "Matrix key"},
    ),
    "accounts/profile/passkeys/<int:passkey_id>/remove/": Row(
        "POST",
        {**viewers(200), "finance_staff": 403},
        _own_passkey("remove"),
        _passkey_remove_form,
    ),
    "accounts/profile/sessions/end-others/": Row(
        "POST", viewers(200), lambda w: "/accounts/profile/sessions/end-others/"
    ),
    "accounts/staff/": Row("GET", supervisors(200), lambda w: "/accounts/staff/"),
    "accounts/staff/<str:username>/end-sessions/": Row(
        "POST", supervisors(200), lambda w: "/accounts/staff/rm-target/end-sessions/"
    ),
    "accounts/staff/<str:username>/reset-second-factor/": Row(
        "POST",
        supervisors(200),
        lambda w: "/accounts/staff/rm-target/reset-second-factor/",
        _reset_form,
    ),
    "drill/": Row("GET", supervisors(200), lambda w: "/drill/"),
    "drill/run": Row("POST", supervisors(302), lambda w: "/drill/run"),
    "worklist/": Row("GET", viewers(200), lambda w: "/worklist/?sort=amount"),
    "worklist/views/": Row(
        "POST",
        viewers(302),
        lambda w: "/worklist/views/",
        lambda w: {"name": f"v-{uuid.uuid4().hex[:8]}", "query": "sort=amount"},
    ),
    "worklist/views/<int:view_id>/delete/": Row("POST", viewers(302), _own_view),
}


def _routes(resolver: URLResolver | None = None, prefix: str = "") -> list[str]:
    resolver = resolver or get_resolver()
    found: list[str] = []
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found.extend(_routes(entry, route))
        elif isinstance(entry, URLPattern):
            found.append(route)
    return found


def _sign_in(client: Client, role: str, world: World | None = None) -> None:
    if role != "anonymous":
        user = sign_in(
            client,
            None if role == "no_group" else role,
            username=f"user-{role}",
            password=MATRIX_PASSWORD,
        )
        if world is not None:
            world.username = user.username


# The world as first built on each engine, with every item it wrote, table by table:
# building it runs the intake, the sweep and an override request (0.3-1.3 s on two
# loaded cores); each later test gets a copy of its items in its own empty tables (one
# batch write) and of its Django user, so every test still starts from the same state.
_BUILT: dict[str, tuple[World, TablesSnapshot]] = {}


def _world_on(ddb) -> World:
    built = _BUILT.get(ddb.name)
    if built is None:
        world = _world()
        _BUILT[ddb.name] = (world, TablesSnapshot.take(ddb))
        return replace(world)
    world, snapshot = built
    snapshot.restore(ddb)
    staff_user("rm-target", "finance_staff", email="t@example.org")
    return replace(world)


@pytest.fixture
def world(ddb, settings, tmp_path, monkeypatch) -> World:
    settings.AUDIT_EXPORT_DIR = tmp_path
    # The matrix checks who may start a drill, not the drill itself.
    from dashboard.staff.views import drill

    class _Started:
        id = "drill-task-id"

    monkeypatch.setattr(drill.drill_task, "delay", lambda *a, **k: _Started())
    return _world_on(ddb)


def test_every_url_has_a_row():
    """Walks the URL resolver: every route outside the exempt prefixes has a row in the
    matrix, and every row is a route that exists."""
    routes = {r for r in _routes() if not r.startswith(EXEMPT)}
    assert routes - set(MATRIX) == set(), "URLs without a row in the role matrix"
    assert set(MATRIX) - routes == set(), "rows for URLs that no longer exist"


# URLs that are a page (GET) as well as the action their MATRIX row checks (POST): a
# list, and where a new one is asked for.
PAGE_TOO = {"audit/exports/": Row("GET", viewers(200), lambda w: "/audit/exports/")}
CHECKS = [(route, "") for route in sorted(MATRIX)] + [(route, "page") for route in PAGE_TOO]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("route", "part"), CHECKS)
def test_role_matrix(world, client, route, part, role):
    """Each role gets exactly the status the table says for each view and action."""
    row = PAGE_TOO[route] if part else MATRIX[route]
    _sign_in(client, role, world)
    path = row.path(world)
    response = client.get(path) if row.method == "GET" else client.post(path, row.data(world))
    expected = row.expected[role]
    if expected == LOGIN:
        assert response.status_code == 302, (route, role, response.status_code)
        assert response["Location"].startswith("/accounts/login/?next=")
    else:
        assert response.status_code == expected, (route, role, response.status_code)
        if expected == 302:
            assert not response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("route", sorted(MATRIX))
def test_wrong_method_is_405(world, client, route):
    """Each URL answers only its own method: pages refuse POST, actions refuse GET (and
    a page that takes a POST too refuses PUT)."""
    _sign_in(client, "supervisor")
    row = MATRIX[route]
    path = row.path(world)
    if route in PAGE_TOO:
        response = client.put(path)
    else:
        response = client.post(path) if row.method == "GET" else client.get(path)
    assert response.status_code == 405, (route, response.status_code)


POSTS = sorted(r for r, row in MATRIX.items() if row.method == "POST")
# Past the CSRF check, still refused on its own terms: no passkey ceremony was begun.
REFUSED_PAST_CSRF = {"accounts/profile/passkeys/complete/"}


@pytest.mark.parametrize("route", POSTS)
def test_posts_need_the_csrf_token(world, route):
    """With CSRF checks enforced, a POST without the token is 403 (plain and htmx) and
    changes nothing; with the token htmx sends (hx-headers on <body>) it goes through."""
    row = MATRIX[route]
    client = Client(enforce_csrf_checks=True)
    _sign_in(client, "supervisor", world)
    path = row.path(world)
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        assert client.post(path, row.data(world), **headers).status_code == 403, headers
    page = client.get("/").content.decode()
    token = re.search(r'hx-headers=\'\{"X-CSRFToken": "([^"]+)"\}\'', page).group(1)
    response = client.post(path, row.data(world), HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    assert response.status_code != 403, (route, response.status_code)
    assert response.status_code < 400 or route in REFUSED_PAST_CSRF
