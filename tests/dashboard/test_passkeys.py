"""Passkeys beside the authenticator app. The browser proof of enrolment and
sign-in is tests/browser/test_passkeys.py (Chromium's virtual authenticator); here: an
answer that is no valid passkey gets the one answer of every failed sign-in, a
supervisor's reset removes a colleague's passkeys with the rest of their devices, and
the owner renames and removes their own."""

from __future__ import annotations

import json

import pytest
from django.core import mail
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from dashboard.accounts import mfa
from tests.conftest import staff_actor
from tests.helpers import audit_events, pass_second_factor, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

PASSWORD = "correct-horse-battery-9"


def _passkey(user, mark: int = 1) -> WebAuthnCredential:
    return WebAuthnCredential.objects.create(
        user=user, name="passkey", credential_id=bytes([mark]) * 16, public_key=b"\x02" * 32
    )


def test_a_forged_passkey_answer_gets_the_one_failed_answer(ddb):
    user = staff_user("sam", "supervisor", password=PASSWORD)
    TOTPDevice.objects.create(user=user, name=mfa.AUTHENTICATOR, confirmed=True)
    _passkey(user)
    client = Client()
    assert client.post("/accounts/login/passkey/").status_code == 200  # a challenge
    raw = "AQEBAQEBAQEBAQEBAQEBAQ"  # the stored credential's id, base64url
    forged = json.dumps({"id": raw, "rawId": raw, "type": "public-key", "response": {}})
    for password in (PASSWORD, "wrong-password-1"):
        answer = client.post(
            "/accounts/login/", {"username": "sam", "password": password, "passkey": forged}
        )
        assert answer.status_code == 200
        assert "Sign-in failed." in answer.content.decode()
    assert client.get("/accounts/profile/").status_code == 302
    failed = [e for e in audit_events(ddb) if e["action"] == "sign_in_failed"]
    assert [e["detail"]["stage"] for e in failed] == ["second_factor", "password"]


def test_a_reset_removes_the_colleagues_passkeys(ddb):
    target = staff_user("aud", "auditor", password=PASSWORD)
    TOTPDevice.objects.create(user=target, name=mfa.AUTHENTICATOR, confirmed=True)
    _passkey(target)
    mfa.mfa_reset(target, actor=staff_actor("sam", "supervisor"), reason="phone and key lost")
    assert not WebAuthnCredential.objects.filter(user=target).exists()
    [event] = [e for e in audit_events(ddb) if e["action"] == "mfa_reset"]
    assert event["detail"]["devices_removed"] == 2


# --- renaming and removing one's own ------------------------------------------------------


def _code(device: TOTPDevice) -> str:
    device.refresh_from_db()
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{value:0{device.digits}d}"


def _session(user) -> Client:
    client = Client()
    client.force_login(user)
    pass_second_factor(client, user)
    return client


def _gone(client: Client) -> bool:
    answer = client.get("/accounts/profile/")
    return answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def _events(ddb, username: str, action: str) -> list[dict]:
    return [
        e for e in audit_events(ddb) if e["stream"] == f"STAFF#{username}" and e["action"] == action
    ]


@pytest.fixture
def sam():
    user = staff_user("sam", "supervisor", password=PASSWORD, email="sam@example.org")
    device = TOTPDevice.objects.create(user=user, name=mfa.AUTHENTICATOR, confirmed=True)
    return user, device, _passkey(user)


def test_the_profile_lists_each_passkey_with_rename_and_remove(ddb, sam):
    """Each passkey is listed by its name with a rename and a remove form."""
    user, _, key = sam
    html = _session(user).get("/accounts/profile/").content.decode()
    assert f'action="/accounts/profile/passkeys/{key.pk}/rename/"' in html
    assert f'action="/accounts/profile/passkeys/{key.pk}/remove/"' in html


@pytest.mark.parametrize("name", ["", "   ", "x" * 65])
def test_a_passkey_name_must_be_1_to_64_characters(ddb, sam, name):
    """An empty, blank or 65-character name is refused (400) and nothing changes."""
    user, _, key = sam
    refused = _session(user).post(f"/accounts/profile/passkeys/{key.pk}/rename/", {"name": name})
    assert refused.status_code == 400
    key.refresh_from_db()
    assert key.name == "passkey" and _events(ddb, "sam", "passkey_renamed") == []


def test_the_owner_renames_a_passkey_and_it_is_audited(ddb, sam):
    """A name of 64 characters (surrounding spaces dropped) is kept, shown on the profile,
    and a passkey_renamed event records the old and the new name."""
    user, _, key = sam
    name = "Laptop fingerprint " + "x" * 45
    done = _session(user).post(
        f"/accounts/profile/passkeys/{key.pk}/rename/", {"name": f"  {name}  "}
    )
    assert done.status_code == 200, done.content.decode()
    key.refresh_from_db()
    assert key.name == name and name in done.content.decode()
    [event] = _events(ddb, "sam", "passkey_renamed")
    assert event["detail"] == {
        "account": "sam",
        "passkey": key.pk,
        "name_before": "passkey",
        "name_after": name,
    }


def test_removing_a_passkey_needs_the_password_and_a_current_code(ddb, sam):
    """A (stolen) session alone, a wrong password or a wrong code removes nothing: the
    passkey, the other sessions, the trail and the mailbox are unchanged."""
    user, device, key = sam
    other = _session(user)
    mine = _session(user)
    url = f"/accounts/profile/passkeys/{key.pk}/remove/"
    for form in (
        {},
        {"password": "wrong-password-1", "current_token": _code(device)},
        {"password": PASSWORD, "current_token": "12345678"},
    ):
        refused = mine.post(url, form)
        assert refused.status_code == 400, form
    assert WebAuthnCredential.objects.filter(pk=key.pk).exists()
    assert not _gone(other)
    assert _events(ddb, "sam", "passkey_removed") == [] and mail.outbox == []


@pytest.mark.parametrize("proof", ["app", "recovery"])
def test_the_owner_removes_a_passkey_with_password_and_code(ddb, sam, proof):
    """Password and a code from the app (or a recovery code): the passkey goes, every
    other session of the account ends (this one stays), a passkey_removed event says how
    it was proved and how many ended (no secret), and the account is e-mailed."""
    user, device, key = sam
    recovery = mfa._recovery_codes_replace(user)
    other = _session(user)
    mine = _session(user)
    token = _code(device) if proof == "app" else recovery[0]
    done = mine.post(
        f"/accounts/profile/passkeys/{key.pk}/remove/",
        {"password": PASSWORD, "current_token": token},
    )
    assert done.status_code == 200, done.content.decode()
    assert not WebAuthnCredential.objects.filter(pk=key.pk).exists()
    assert _gone(other) and not _gone(mine)
    [event] = _events(ddb, "sam", "passkey_removed")
    assert event["detail"] == {
        "account": "sam",
        "passkey": key.pk,
        "name": "passkey",
        "proved_with": "authenticator" if proof == "app" else "recovery_code",
        "other_sessions_ended": 1,
    }
    assert PASSWORD not in str(event) and token not in str(event)
    [message] = mail.outbox
    assert message.to == ["sam@example.org"] and "passkey" in message.subject.lower()


def test_the_last_second_factor_is_not_removed(ddb, settings):
    """Where the role requires a second factor, an account whose only one is its passkey
    (no authenticator app, recovery codes left) cannot remove it: 409 saying so."""
    settings.STAFF_MFA_REQUIRED = True
    user = staff_user("aud", "auditor", password=PASSWORD)
    key = _passkey(user)
    recovery = mfa._recovery_codes_replace(user)
    client = Client()
    client.force_login(user)
    session = client.session
    from django_otp import DEVICE_ID_SESSION_KEY

    session[DEVICE_ID_SESSION_KEY] = key.persistent_id
    session.save()
    refused = client.post(
        f"/accounts/profile/passkeys/{key.pk}/remove/",
        {"password": PASSWORD, "current_token": recovery[0]},
    )
    assert refused.status_code == 409
    assert "last second factor" in refused.content.decode()
    assert WebAuthnCredential.objects.filter(pk=key.pk).exists()
    assert _events(ddb, "aud", "passkey_removed") == []


def test_nobody_renames_or_removes_anothers_passkey(ddb, sam):
    """Another supervisor, with their own right password and code, posts to sam's
    passkey by its id: 404 for both, the passkey as it was, nothing on either stream."""
    _, _, key = sam
    ann = staff_user("ann", "supervisor", password=PASSWORD)
    ann_device = TOTPDevice.objects.create(user=ann, name=mfa.AUTHENTICATOR, confirmed=True)
    _passkey(ann, mark=3)
    client = _session(ann)
    renamed = client.post(f"/accounts/profile/passkeys/{key.pk}/rename/", {"name": "mine now"})
    removed = client.post(
        f"/accounts/profile/passkeys/{key.pk}/remove/",
        {"password": PASSWORD, "current_token": _code(ann_device)},
    )
    assert renamed.status_code == 404 and removed.status_code == 404
    key.refresh_from_db()
    assert key.name == "passkey"
    for name in ("sam", "ann"):
        for action in ("passkey_renamed", "passkey_removed"):
            assert _events(ddb, name, action) == []


@pytest.mark.parametrize(
    ("host", "offered"),
    [("localhost:8000", True), ("127.0.0.1:8000", False)],
)
def test_passkeys_are_offered_only_where_a_browser_can_make_one(ddb, sam, host, offered):
    """A relying party is a domain name: on an IP address (``make run``'s
    http://127.0.0.1:8000/) every browser refuses to make or use a passkey. There the
    profile and the sign-in page say to open the site by its name instead of offering a
    button that fails."""
    user, _, _ = sam
    profile = _session(user).get("/accounts/profile/", HTTP_HOST=host).content.decode()
    sign_in_page = Client().get("/accounts/login/", HTTP_HOST=host).content.decode()
    for html in (profile, sign_in_page):
        assert ('data-passkey="' in html) is offered, host
        assert ("open this site by its name" in html) is not offered, host
    if not offered:
        assert "http://localhost:8000/" in profile
