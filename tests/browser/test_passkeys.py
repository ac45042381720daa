"""Passkeys in Chromium: a supervisor, signed in with the authenticator app,
adds a passkey on the profile with Chromium's virtual authenticator (CTAP2, internal,
resident key, user verification), signs out, and signs in again with username, password
and the passkey in place of the code; both are events on the account's STAFF# stream."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD
from tests.helpers import audit_events

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _virtual_authenticator(page) -> None:
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )


def test_a_supervisor_adds_a_passkey_and_signs_in_with_it(ddb, open_browser, live_server):
    from django_otp_webauthn.models import WebAuthnCredential

    page = open_browser("supervisor")
    _virtual_authenticator(page)
    page.goto(f"{live_server.url}/accounts/profile/")
    page.get_by_role("button", name="Add a passkey").click()
    page.wait_for_url("**/accounts/profile/?passkey=added")
    assert page.locator("ul.passkeys li").count() == 1
    assert WebAuthnCredential.objects.filter(user__username="supervisor").count() == 1

    page.get_by_role("button", name="Sign out").click()
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("supervisor")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Use a passkey").click()
    page.wait_for_url(f"{live_server.url}/")

    events = [e for e in audit_events(ddb) if e["stream"] == "STAFF#supervisor"]
    actions = [e["action"] for e in events]
    assert "passkey_enrolled" in actions
    signed_in = [e for e in events if e["action"] == "sign_in_succeeded"]
    assert signed_in[-1]["detail"]["second_factor"] == "passkey"


def test_a_wrong_password_with_a_passkey_is_refused_alike(ddb, open_browser, live_server):
    page = open_browser("supervisor")
    _virtual_authenticator(page)
    page.goto(f"{live_server.url}/accounts/profile/")
    page.get_by_role("button", name="Add a passkey").click()
    page.wait_for_url("**/accounts/profile/?passkey=added")
    page.get_by_role("button", name="Sign out").click()
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("supervisor")
    page.get_by_label("Password").fill("wrong-password-1")
    page.get_by_role("button", name="Use a passkey").click()
    page.wait_for_load_state()
    assert "Sign-in failed" in page.locator("[role=alert]").first.inner_text()
    assert "/accounts/login/" in page.url


def test_a_supervisor_renames_and_removes_the_passkey_they_signed_in_with(
    ddb, open_browser, live_server
):
    """Signed in with a passkey, a supervisor renames it on the profile, then removes it
    with the password and the app's code: the page says so, this session stays signed
    in (verified by the app now), and both are events on the account's stream."""
    from django_otp_webauthn.models import WebAuthnCredential

    from tests.browser.conftest import authenticator_code

    page = open_browser("supervisor")
    _virtual_authenticator(page)
    page.goto(f"{live_server.url}/accounts/profile/")
    page.get_by_role("button", name="Add a passkey").click()
    page.wait_for_url("**/accounts/profile/?passkey=added")
    page.get_by_role("button", name="Sign out").click()
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("supervisor")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Use a passkey").click()
    page.wait_for_url(f"{live_server.url}/")

    page.goto(f"{live_server.url}/accounts/profile/")
    key = page.locator("ul.passkeys li")
    key.locator("summary").click()
    key.get_by_label("Name (1 to 64 characters)").fill("Work laptop")
    key.get_by_role("button", name="Rename").click()
    page.get_by_text("Your passkey is renamed.").wait_for()
    assert page.locator("ul.passkeys li strong").inner_text() == "Work laptop"

    key = page.locator("ul.passkeys li")
    key.locator("summary").click()
    key.get_by_label("Your password").fill(PASSWORD)
    key.get_by_label("Code from your app, or a recovery code").fill(
        authenticator_code("supervisor")
    )
    key.get_by_role("button", name="Remove this passkey").click()
    page.get_by_text("Your passkey is removed.").wait_for()
    assert not WebAuthnCredential.objects.filter(user__username="supervisor").exists()
    page.goto(f"{live_server.url}/accounts/profile/")
    assert page.url == f"{live_server.url}/accounts/profile/"  # still signed in

    actions = [e["action"] for e in audit_events(ddb) if e["stream"] == "STAFF#supervisor"]
    assert "passkey_renamed" in actions and "passkey_removed" in actions
