"""API tokens that expire and rotate: ``issue_api_token --expires-in``, at most
two live tokens per tenant, 401 codes that say why, and the last use in the admin."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.admin.utils import display_for_field
from django.core.management import CommandError, call_command

from dashboard.tenancy.models import ApiToken
from reconciliation import clock
from tests.conftest import ApiCaller, pledge_body
from tests.helpers import audit_events, pass_second_factor, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

DAY = 86400


def issue(tenant: str = "acme", *args: str) -> str:
    """The raw token ``issue_api_token`` prints on its last line."""
    out = StringIO()
    call_command("issue_api_token", "--tenant", tenant, *args, stdout=out)
    return out.getvalue().splitlines()[-1]


def assert_refused(response, code: str) -> None:
    """A 401 in the API's one error shape, with the code that says why."""
    assert response.status_code == 401
    assert response.json() == {"error": code, "detail": response.json()["detail"]}
    assert response["WWW-Authenticate"].startswith('Bearer realm="pledges"')


def test_a_token_expires_after_its_days(ddb, client):
    """A token issued for 30 days works until the 30th day ends, then answers 401
    ``token_expired``; expiry is measured on the project's clock."""
    api = ApiCaller(client, issue("acme", "--expires-in", "30"), "acme")
    token = ApiToken.objects.get(tenant="acme")
    assert (token.expires_at - token.created_at).total_seconds() == 30 * DAY
    assert api.post("exp-1", pledge_body()).status_code == 201
    with clock.travel(30 * DAY - 60):
        assert api.post("exp-2", pledge_body()).status_code == 201
    with clock.travel(30 * DAY + 1):
        assert_refused(api.post("exp-3", pledge_body()), "token_expired")
        assert_refused(api.get("exp-1"), "token_expired")
        assert ApiToken.objects.get(pk=token.pk).state == "expired"


def test_without_expires_in_a_token_never_expires(ddb, client):
    """The default: no expiry (tokens issued before expiry existed behave the same)."""
    api = ApiCaller(client, issue("acme"), "acme")
    assert ApiToken.objects.get(tenant="acme").expires_at is None
    with clock.travel(3650 * DAY):
        assert api.post("never-1", pledge_body()).status_code == 201


def test_revoked_unknown_and_missing_tokens_say_which(ddb, client):
    """Revoked: ``token_revoked``; a token never issued: ``token_unknown``; no bearer
    token at all: ``unauthorized``, as before."""
    raw = issue("acme")
    api = ApiCaller(client, raw, "acme")
    assert api.post("rev-1", pledge_body()).status_code == 201
    call_command("revoke_api_token", f"--hint={raw[-6:]}", stdout=StringIO())
    assert_refused(api.post("rev-2", pledge_body()), "token_revoked")
    stranger = ApiCaller(client, raw + "x", "acme")
    assert_refused(stranger.post("rev-3", pledge_body()), "token_unknown")
    missing = client.post("/api/v1/pledges", data="{}", content_type="application/json")
    assert missing.status_code == 401 and missing.json()["error"] == "unauthorized"
    assert missing["WWW-Authenticate"] == 'Bearer realm="pledges"'


def test_two_live_tokens_both_work_and_a_third_is_refused(ddb, client):
    """During a rotation the old and the new token both work; a third is refused naming
    the two, and nothing is issued or audited. Revoking the old one makes room."""
    old, new = issue("acme"), issue("acme")
    assert ApiCaller(client, old, "acme").post("rot-1", pledge_body()).status_code == 201
    assert ApiCaller(client, new, "acme").post("rot-2", pledge_body()).status_code == 201
    with pytest.raises(CommandError, match=r"already has 2 live tokens .*revoke"):
        issue("acme")
    assert ApiToken.objects.filter(tenant="acme").count() == 2
    issued = [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "api_token_issued"]
    assert len(issued) == 2

    # "--hint=…": a hint may begin with "-" (the token is URL-safe base64).
    call_command("revoke_api_token", f"--hint={old[-6:]}", stdout=StringIO())
    third = issue("acme")
    assert ApiCaller(client, third, "acme").post("rot-3", pledge_body()).status_code == 201
    assert_refused(ApiCaller(client, old, "acme").post("rot-4", pledge_body()), "token_revoked")


def test_an_expired_token_does_not_count_as_live(ddb, client):
    """Only live tokens count toward the two: an expired one leaves room."""
    issue("acme", "--expires-in", "1")
    issue("acme")
    with clock.travel(2 * DAY):
        raw = issue("acme")
        assert ApiCaller(client, raw, "acme").post("live-1", pledge_body()).status_code == 201


def test_last_use_is_recorded_at_most_once_a_minute(ddb, client, django_assert_num_queries):
    """The first request records its time; requests within the minute write nothing (one
    query, the token's read); the first one after the minute records again."""
    raw = issue("acme")
    api = ApiCaller(client, raw, "acme")
    token = ApiToken.objects.get(tenant="acme")
    assert token.last_used_at is None
    assert api.post("use-1", pledge_body()).status_code == 201
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    with clock.travel(30), django_assert_num_queries(1):
        assert api.post("use-2", pledge_body()).status_code == 201
    token.refresh_from_db()
    assert token.last_used_at == first
    with clock.travel(61):
        assert api.post("use-3", pledge_body()).status_code == 201
    token.refresh_from_db()
    assert (token.last_used_at - first).total_seconds() >= 61


def test_the_admin_shows_last_use_and_expiry(ddb, client):
    """The token list shows each token's last use (a dash if never used) and expiry."""
    used = issue("acme", "--expires-in", "90")
    issue("acme")
    ApiCaller(client, used, "acme").post("adm-use-1", pledge_body())
    user = staff_user("root", "supervisor")
    user.is_superuser = user.is_staff = True
    user.save()
    client.force_login(user)
    pass_second_factor(client, user)

    page = client.get("/admin/tenancy/apitoken/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "Last used at" in text and "Expires at" in text
    token = ApiToken.objects.get(hint=used[-6:])
    field = ApiToken._meta.get_field("last_used_at")
    expires = ApiToken._meta.get_field("expires_at")
    assert display_for_field(token.expires_at, expires, "-") in text
    cells = re.findall(r'<td class="field-last_used_at[^"]*">([^<]*)</td>', text)
    assert sorted(cells) == sorted([display_for_field(token.last_used_at, field, "-"), "-"])


def test_a_busy_database_never_refuses_a_token_for_its_last_use(ddb, client, monkeypatch):
    """Recording the last use is bookkeeping: when the database refuses that write (SQLite
    answers "database table is locked" to concurrent first uses of one token), the request
    is served and the token's last use stays as it was."""
    from django.db import OperationalError
    from django.db.models import QuerySet

    raw = issue("acme")
    real_update = QuerySet.update

    def locked(self, **kwargs):
        if self.model is ApiToken and "last_used_at" in kwargs:
            raise OperationalError("database table is locked: dashboard_apitoken")
        return real_update(self, **kwargs)

    monkeypatch.setattr(QuerySet, "update", locked)
    assert ApiCaller(client, raw, "acme").post("busy-1", pledge_body()).status_code == 201
    assert ApiToken.objects.get(tenant="acme").last_used_at is None
