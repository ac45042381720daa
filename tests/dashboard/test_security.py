"""Production settings, sign-in protection, sessions, API tokens and CSP."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from dashboard.auth import SESSION_SEEN, SESSION_STARTED
from dashboard.tenancy.models import ApiToken, TokenRefusal, hash_token
from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.tables import drop_tables
from tests.helpers import sign_in_form, staff_user

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct-Horse-battery-9"


def _user(name: str = "ada", role: str = "finance_staff") -> User:
    return staff_user(name, role, password=PASSWORD)


def test_production_settings_pass_check_deploy_at_warning_level(tmp_path, dynamodb_local):
    """`check --deploy --fail-level WARNING` on the production profile reports nothing,
    once ``ddb_setup`` has recorded the configuration the check compares with (without a
    reachable DynamoDB the configuration check warns that it could not look)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DEMO_", "DDB_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="x" * 20 + "-production-secret-key-0123456789-abcdefghijklmnop",
        DJANGO_ALLOWED_HOSTS="pledges.example.org",
        VAR_DIR=str(tmp_path),
        DYNAMODB_ENDPOINT_URL=dynamodb_local.endpoint_url,
        DDB_TABLE_PREFIX=f"deploy{uuid.uuid4().hex[:8]}-",
    )

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
        )

    setup = manage("ddb_setup")
    assert setup.returncode == 0, setup.stdout + setup.stderr
    try:
        result = manage("check", "--deploy", "--fail-level", "WARNING")
    finally:
        client = boto3.client(
            "dynamodb",
            endpoint_url=dynamodb_local.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        drop_tables(client, TableNames.from_prefix(env["DDB_TABLE_PREFIX"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_pages_carry_a_self_only_content_security_policy(client):
    """Every response has a CSP allowing scripts and styles from this origin only."""
    response = client.get("/accounts/login/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response["X-Frame-Options"] == "DENY"


def test_templates_hold_no_inline_script_style_or_handlers():
    """The CSP forbids inline code: no template has a <script> without src, a <style>
    block, a style= attribute or an on*= handler."""
    offenders = []
    for path in [*ROOT.glob("templates/**/*.html"), *ROOT.glob("dashboard/*/templates/**/*.html")]:
        text = path.read_text()
        for pattern in (
            r"<script(?![^>]*\bsrc=)[^>]*>",
            r"<style[\s>]",
            r"\sstyle\s*=",
            r"\son[a-z]+\s*=\s*[\"']",
        ):
            for match in re.finditer(pattern, text, re.I):
                offenders.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert offenders == []


@pytest.mark.django_db
def test_lockout_is_keyed_on_username_and_address_together(settings):
    """Five failures for ada from one address lock ada there only: ada from another
    address, and a colleague from the same address, still sign in; after the cool-off
    ada signs in again."""
    _user("ada")
    _user("bob")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in_form(Client(), "ada", "wrong-password", address="10.0.0.9")
    locked = sign_in_form(Client(), "ada", PASSWORD, address="10.0.0.9")
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content
    assert sign_in_form(Client(), "ada", PASSWORD, address="10.0.0.10").status_code == 302
    assert sign_in_form(Client(), "bob", PASSWORD, address="10.0.0.9").status_code == 302
    call_command("axes_reset_username", "ada", verbosity=0)
    assert sign_in_form(Client(), "ada", PASSWORD, address="10.0.0.9").status_code == 302


@pytest.mark.django_db
def test_session_key_and_csrf_token_rotate_at_sign_in():
    """The session id and CSRF token in use before sign-in are not valid after it."""
    _user("ada")
    client = Client()
    client.get("/accounts/login/")
    client.session.save()
    before_session = client.cookies["sessionid"].value if "sessionid" in client.cookies else ""
    before_csrf = client.cookies["csrftoken"].value
    assert sign_in_form(client, "ada", PASSWORD).status_code == 302
    assert client.cookies["sessionid"].value != before_session
    assert client.cookies["csrftoken"].value != before_csrf


@pytest.mark.django_db
def test_idle_and_absolute_session_timeouts(settings):
    """A session idle past SESSION_IDLE_TIMEOUT_S, or older than SESSION_COOKIE_AGE, is
    signed out on its next request."""
    _user("ada")
    for key, age in (
        (SESSION_SEEN, settings.SESSION_IDLE_TIMEOUT_S + 5),
        (SESSION_STARTED, settings.SESSION_COOKIE_AGE + 5),
    ):
        client = Client()
        sign_in_form(client, "ada", PASSWORD)
        assert client.get("/drill/").status_code == 403  # signed in, not a supervisor
        session = client.session
        session[key] = int(time.time()) - age
        if key == SESSION_STARTED:
            session[SESSION_SEEN] = int(time.time())
        session.save()
        response = client.get("/drill/")
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
        assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_password_change_signs_out_other_sessions():
    """After a password change, sessions opened with the old password are signed out."""
    user = _user("ada")
    other = Client()
    sign_in_form(other, "ada", PASSWORD)
    assert other.get("/drill/").status_code == 403  # signed in (not a supervisor)
    user.set_password("a-New-password-42")
    user.save()
    response = other.get("/drill/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.django_db
@pytest.mark.engines("moto")
def test_api_tokens_are_stored_hashed_and_revocable(ddb, client, capsys):
    """Only the SHA-256 of a token is stored; revoking it makes the API answer 401."""
    call_command("issue_api_token", "--tenant", "acme")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    stored = ApiToken.objects.get(tenant="acme")
    assert stored.token_hash == hash_token(raw) and raw not in stored.token_hash
    assert ApiToken.authenticate(raw).tenant == "acme"
    assert (
        ApiToken.authenticate(raw[:-1] + ("x" if raw[-1] != "x" else "y")) is TokenRefusal.UNKNOWN
    )
    call_command("revoke_api_token", "--tenant", "acme", stdout=io.StringIO())
    response = client.get("/api/v1/pledges/k", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
def test_staff_sessions_do_not_open_the_api_and_tokens_do_not_open_the_dashboard(role):
    """The role × action matrix extended to the API: a signed-in staff session without a
    bearer token is 401 on the intake API; a tenant's bearer token is not a dashboard
    sign-in."""
    user = _user(f"{role}-1", role)
    session = Client()
    session.force_login(user)
    assert session.get("/api/v1/pledges/k").status_code == 401
    posted = session.post(
        "/api/v1/pledges", data="{}", content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert posted.status_code == 401
    _, raw = ApiToken.issue("acme")
    anonymous = Client()
    for path in ("/", "/queues/stuck/", "/audit/", "/approvals/", "/drill/"):
        response = anonymous.get(path, HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
