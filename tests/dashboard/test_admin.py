"""The administration screen at /admin/: superusers only, behind the
staff sign-in and its second factor; tokens shown once; every change audited."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group

from dashboard.tenancy.models import ApiToken, Fund, Tenant
from tests.conftest import ApiCaller, pledge_body
from tests.helpers import audit_events, pass_second_factor, sign_in, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]


def superuser(client, username: str = "root"):
    user = staff_user(username, "supervisor")
    user.is_superuser = user.is_staff = True
    user.save()
    client.force_login(user)
    pass_second_factor(client, user)
    return user


def tenant_events(ddb, tenant: str) -> list[dict]:
    return [e for e in audit_events(ddb, f"TENANT#{tenant}")]


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
def test_staff_roles_never_reach_admin(client, role):
    """Signed in as finance staff, a supervisor or an auditor: 403 on every admin page,
    and the admin's own login form is never served."""
    sign_in(client, role)
    for path in ("/admin/", "/admin/tenancy/apitoken/", "/admin/login/?next=/admin/"):
        assert client.get(path).status_code == 403, path


@pytest.mark.django_db
def test_anonymous_is_sent_to_the_staff_sign_in(client):
    """The admin's login is the staff sign-in (with its second factor)."""
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    login = client.get("/admin/login/?next=/admin/tenancy/fund/")
    assert login.status_code == 302
    assert login["Location"] == "/accounts/login/?next=/admin/tenancy/fund/"


@pytest.mark.django_db
def test_superuser_must_pass_the_second_factor(client, settings):
    """Where a second factor applies, a superuser's session without one is signed out;
    with one, the admin opens."""
    settings.STAFF_MFA_REQUIRED = True
    user = staff_user("root", "supervisor")
    user.is_superuser = True
    user.save()
    client.force_login(user)
    response = client.get("/admin/")
    assert response.status_code == 302 and "_auth_user_id" not in client.session
    client.force_login(user)
    pass_second_factor(client, user)
    assert client.get("/admin/").status_code == 200


@pytest.mark.django_db
def test_superuser_without_a_role_needs_a_factor_too(settings):
    """A superuser with no staff group still counts as needing a second factor."""
    from dashboard.accounts import mfa

    settings.STAFF_MFA_REQUIRED = True
    user = staff_user("root", None)
    user.is_superuser = True
    assert mfa.mfa_required(user)
    settings.STAFF_MFA_REQUIRED = False
    assert not mfa.mfa_required(user)


def test_issue_token_shows_it_once_and_revoke_keeps_the_row(ddb, client):
    """Issuing from admin answers the raw token once (no-store, never stored), the token
    works against the API, the revoke action sets revoked_at and keeps the row, and
    each is an audit event on TENANT#acme."""
    superuser(client)
    form = client.get("/admin/tenancy/apitoken/add/")
    assert form.status_code == 200 and b'name="tenant"' in form.content
    issued = client.post("/admin/tenancy/apitoken/add/", {"tenant": "acme"})
    assert issued.status_code == 200
    assert "no-store" in issued["Cache-Control"]
    raw = issued.context["raw"]
    assert raw.startswith("plg_") and raw.encode() in issued.content
    token = ApiToken.objects.get(tenant="acme")
    assert token.hint == raw[-6:] and raw not in (token.token_hash, token.hint)
    assert Tenant.objects.filter(name="acme").exists()  # created with its default funds
    # The token's page never shows it again.
    detail = client.get(f"/admin/tenancy/apitoken/{token.pk}/change/")
    assert detail.status_code == 200 and raw.encode() not in detail.content

    api = ApiCaller(client, raw, "acme")
    assert api.post("adm-1", pledge_body()).status_code == 201

    revoke = client.post(
        "/admin/tenancy/apitoken/",
        {"action": "revoke_tokens", "_selected_action": [token.pk]},
    )
    assert revoke.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert ApiToken.objects.filter(pk=token.pk).exists()
    assert api.post("adm-2", pledge_body()).status_code == 401

    events = tenant_events(ddb, "acme")
    assert [e["action"] for e in events] == [
        "tenant_created",
        "api_token_issued",
        "api_token_revoked",
    ]
    assert events[1]["actor"]["username"] == "root" and events[1]["actor"]["role"] == "admin"
    assert events[1]["detail"]["hint"] == token.hint
    assert raw not in str(events)


def test_tokens_cannot_be_deleted_or_edited(ddb, client):
    """No delete (button, view or bulk action) and no edit of a token."""
    superuser(client)
    token, _ = ApiToken.issue("acme")
    assert client.post(f"/admin/tenancy/apitoken/{token.pk}/delete/").status_code == 403
    page = client.get("/admin/tenancy/apitoken/")
    assert b"delete_selected" not in page.content
    client.post(f"/admin/tenancy/apitoken/{token.pk}/change/", {"tenant": "other", "hint": "x"})
    token.refresh_from_db()
    assert token.tenant == "acme" and token.hint != "x"


def test_fund_registered_changed_and_removed_are_audited(ddb, client):
    """A fund added, its limit changed and it removed: three events with before/after;
    a limit finer than the currency's minor units is refused on the form."""
    superuser(client)
    tenant = Tenant.objects.provision("acme")
    refused = client.post(
        "/admin/tenancy/fund/add/",
        {"tenant": tenant.pk, "code": "relief", "currency": "JPY", "max_amount": "10.5"},
    )
    assert refused.status_code == 200 and b"JPY takes at most 0 decimal places" in refused.content
    added = client.post(
        "/admin/tenancy/fund/add/",
        {"tenant": tenant.pk, "code": "relief", "currency": "jpy", "max_amount": "50000"},
    )
    assert added.status_code == 302, added.content
    fund = Fund.objects.get(tenant=tenant, code="RELIEF", currency="JPY")
    changed = client.post(f"/admin/tenancy/fund/{fund.pk}/change/", {"max_amount": "70000"})
    assert changed.status_code == 302
    fund.refresh_from_db()
    assert fund.max_amount == Decimal("70000")
    removed = client.post(f"/admin/tenancy/fund/{fund.pk}/delete/", {"post": "yes"})
    assert removed.status_code == 302
    assert not Fund.objects.filter(pk=fund.pk).exists()
    events = tenant_events(ddb, "acme")
    assert [e["action"] for e in events] == [
        "fund_registered",
        "fund_limit_changed",
        "fund_removed",
    ]
    assert events[0]["after"] == {"fund": "RELIEF", "currency": "JPY", "max_amount": "50000"}
    assert events[1]["before"]["max_amount"] == "50000"
    assert events[1]["after"]["max_amount"] == "70000"


def test_tenant_added_in_admin_starts_with_default_funds(ddb, client, settings):
    """A tenant created here gets DEFAULT_FUNDS, and the event lists them."""
    settings.DEFAULT_FUNDS = "GENERAL:USD:100,RELIEF:EUR:50"
    superuser(client)
    response = client.post("/admin/tenancy/tenant/add/", {"name": "globex"})
    assert response.status_code == 302, response.content
    funds = sorted(Fund.objects.filter(tenant__name="globex").values_list("code", "currency"))
    assert funds == [("GENERAL", "USD"), ("RELIEF", "EUR")]
    [event] = tenant_events(ddb, "globex")
    assert event["action"] == "tenant_created"
    assert event["after"]["funds"][1] == {
        "fund": "RELIEF",
        "currency": "EUR",
        "max_amount": "50.00",
    }
    assert (
        client.post(
            f"/admin/tenancy/tenant/{Tenant.objects.get(name='globex').pk}/delete/"
        ).status_code
        == 403
    )


def test_role_change_in_admin_is_a_staff_event(ddb, client):
    """Moving a person from finance staff to auditor in admin: staff_role_changed on
    STAFF#ada with before and after; two roles at once are refused."""
    superuser(client)
    ada = staff_user("ada", "finance_staff")
    auditor = Group.objects.get_or_create(name="auditor")[0]
    supervisor = Group.objects.get_or_create(name="supervisor")[0]
    page = client.get(f"/admin/auth/user/{ada.pk}/change/")
    assert page.status_code == 200
    form = {
        "username": "ada",
        "email": "ada@example.org",
        "is_active": "on",
        "groups": [auditor.pk],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    two = client.post(
        f"/admin/auth/user/{ada.pk}/change/", {**form, "groups": [auditor.pk, supervisor.pk]}
    )
    assert two.status_code == 200 and b"one role" in two.content
    response = client.post(f"/admin/auth/user/{ada.pk}/change/", form)
    assert response.status_code == 302, response.content
    assert list(ada.groups.values_list("name", flat=True)) == ["auditor"]
    [event] = [e for e in audit_events(ddb, "STAFF#ada")]
    assert event["action"] == "staff_role_changed"
    assert event["before"]["role"] == "finance_staff" and event["after"]["role"] == "auditor"


def test_admin_change_refused_by_the_audit_trail_changes_nothing(db, client, settings):
    """DynamoDB unreachable: issuing a token answers 503 saying nothing was changed, and
    no token or tenant was created."""
    from reconciliation.dynamo.client import reset_clients
    from reconciliation.dynamo.local import free_port

    superuser(client)
    settings.DYNAMODB_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.DDB_REGIONS = ""
    settings.DDB_MAX_ATTEMPTS = 1
    settings.DDB_APP_RETRY_ATTEMPTS = 1
    reset_clients()
    try:
        response = client.post("/admin/tenancy/apitoken/add/", {"tenant": "acme"})
        assert response.status_code == 503
        assert b"nothing was changed" in response.content
        assert not ApiToken.objects.exists() and not Tenant.objects.exists()
        fund = client.post("/admin/tenancy/tenant/add/", {"name": "globex"})
        assert fund.status_code == 503 and not Tenant.objects.exists()
    finally:
        reset_clients()


def test_add_staff_superuser_enrols_a_second_factor_and_is_audited(ddb, settings):
    """``add_staff --superuser``: a superuser in its role group, an authenticator enrolled
    where a second factor applies (URI on the last line), and the event says so."""
    from io import StringIO

    from django.contrib.auth.models import User
    from django.core.management import call_command

    settings.STAFF_MFA_REQUIRED = True
    out = StringIO()
    call_command("add_staff", "root", "--role", "supervisor", "--superuser", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "created root in group supervisor (superuser: /admin/)"
    assert lines[-1].startswith("otpauth://")
    root = User.objects.get(username="root")
    assert root.is_superuser and list(root.groups.values_list("name", flat=True)) == ["supervisor"]
    [created, enrolled] = audit_events(ddb, "STAFF#root")
    assert created["action"] == "staff_created"
    assert created["after"] == {"role": "supervisor", "active": True, "superuser": True}
    assert enrolled["action"] == "mfa_enrolled"


def test_token_commands_leave_the_same_trail(ddb, capsys):
    """issue_api_token and revoke_api_token write the events the admin writes, by the
    system through the command; the raw token never reaches the trail."""
    from django.core.management import call_command

    call_command("issue_api_token", "--tenant", "initech")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("revoke_api_token", "--tenant", "initech")
    events = tenant_events(ddb, "initech")
    assert [e["action"] for e in events] == [
        "tenant_created",
        "api_token_issued",
        "api_token_revoked",
    ]
    assert {e["actor"]["role"] for e in events} == {"system"}
    assert events[1]["detail"]["hint"] == raw[-6:] and raw not in str(events)


def test_superusers_see_the_administration_link_in_the_navigation(ddb, client):
    """A superuser's pages link to /admin/ from the top navigation; a supervisor who is
    not one sees no such link (the link would answer 403)."""
    superuser(client)
    page = client.get("/queues/stuck/")
    assert page.status_code == 200
    assert b'<a href="/admin/">Administration</a>' in page.content

    client.logout()
    sign_in(client, "supervisor", "plain-supervisor")
    page = client.get("/queues/stuck/")
    assert page.status_code == 200 and b"Administration</a>" not in page.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/admin/dashboard/apitoken/", "/admin/tenancy/apitoken/"),
        (
            "/admin/dashboard/fund/?tenant__id__exact=acme",
            "/admin/tenancy/fund/?tenant__id__exact=acme",
        ),
        ("/admin/dashboard/webhookendpoint/3/change/", "/admin/tenancy/webhookendpoint/3/change/"),
    ],
)
def test_the_old_admin_addresses_lead_to_the_tenancy_pages(client, old, new):
    """Tokens, tenants, funds and endpoints moved to their own app's admin label; an old
    link is sent on, query string kept, and Django's own admin paths are not caught."""
    response = client.get(old)
    assert response.status_code == 301
    assert response["Location"] == new
    assert client.get("/admin/dashboard/").status_code != 301
