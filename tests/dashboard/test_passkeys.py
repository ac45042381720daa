"""Passkeys beside the authenticator app (issue 24). The browser proof of enrolment and
sign-in is tests/browser/test_passkeys.py (Chromium's virtual authenticator); here: an
answer that is no valid passkey gets the one answer of every failed sign-in, and a
supervisor's reset removes a colleague's passkeys with the rest of their devices."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from dashboard.accounts import mfa
from tests.conftest import staff_actor
from tests.helpers import audit_events, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

PASSWORD = "correct-horse-battery-9"


def _passkey(user) -> WebAuthnCredential:
    return WebAuthnCredential.objects.create(
        user=user, name="passkey", credential_id=b"\x01" * 16, public_key=b"\x02" * 32
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
