"""The administration screen in a real browser: a superuser signs in
through the staff sign-in with a second factor, issues an API token, sees it once, the
token records a pledge, then is revoked, and both are in the audit trail."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from dashboard.tenancy.models import Tenant
from tests.browser.conftest import PASSWORD, authenticator_code
from tests.helpers import audit_events, staff_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _post_pledge(base: str, token: str, key: str) -> int:
    body = {"donor_ref": "D-1", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}
    request = urllib.request.Request(
        f"{base}/api/v1/pledges",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_superuser_issues_sees_once_uses_and_revokes_a_token(
    ddb, chromium_browser, live_server, screenshots, settings
):
    """Sign in (with the authenticator), issue a token for acme in admin, read it once,
    use it against the API, revoke it in admin; the token no longer works and the audit
    trail has both events on TENANT#acme. The page runs under the site's CSP without a
    refused script or style."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    settings.STAFF_MFA_REQUIRED = True
    root = staff_user("root", "supervisor", password=PASSWORD)
    root.is_superuser = root.is_staff = True
    root.save()
    TOTPDevice.objects.create(user=root, name="authenticator", confirmed=True)

    context = chromium_browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    refused: list[str] = []
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    try:
        page.goto(f"{live_server.url}/admin/")
        page.wait_for_url(f"{live_server.url}/accounts/login/?next=/admin/")
        page.get_by_label("Username").fill("root")
        page.get_by_label("Password").fill(PASSWORD)
        page.locator("#id_otp_token").fill(authenticator_code("root"))
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{live_server.url}/admin/")
        assert page.get_by_role("link", name="API tokens").first.is_visible()

        page.goto(f"{live_server.url}/admin/tenancy/apitoken/add/")
        page.locator("#id_tenant").fill("acme")
        page.get_by_role("button", name="Issue token").click()
        page.get_by_text("shown this once").wait_for()
        raw = page.locator("#issued-token").input_value()
        assert raw.startswith("plg_")
        screenshots.save(page, "admin-token-issued-1280.png")

        assert _post_pledge(live_server.url, raw, "admin-browser-1") == 201

        page.goto(f"{live_server.url}/admin/tenancy/apitoken/")
        assert raw not in page.content()
        screenshots.save(page, "admin-tokens-1280.png")
        page.locator("input[name=_selected_action]").first.check()
        page.locator("select[name=action]").select_option("revoke_tokens")
        page.get_by_role("button", name="Go").click()
        page.get_by_text("Revoked 1 token:").wait_for()
        screenshots.save(page, "admin-token-revoked-1280.png")

        assert _post_pledge(live_server.url, raw, "admin-browser-2") == 401

        # The other screens (the staff form with its role boxes, a fund's form, a tenant
        # with its funds) render under the same CSP.
        tenant = Tenant.objects.get(name="acme")
        for path in (
            f"/admin/auth/user/{root.pk}/change/",
            "/admin/tenancy/fund/add/",
            f"/admin/tenancy/tenant/{tenant.pk}/change/",
            "/admin/tenancy/fund/",
        ):
            page.goto(f"{live_server.url}{path}")
            page.locator("#content").wait_for()
        screenshots.save(page, "admin-funds-1280.png")
        actions = [e["action"] for e in audit_events(ddb, "TENANT#acme")]
        assert actions == ["tenant_created", "api_token_issued", "api_token_revoked"]
        assert refused == []
    finally:
        context.close()
