"""Replacing one's own authenticator: a stolen session alone cannot do it. It needs the
password and a code from a current device (the app, or a recovery code), ends the
account's other sessions, is an audit event without any secret in it, and is e-mailed to
the account."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from dashboard.accounts import mfa
from tests.helpers import audit_events, form_signed_in, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

PASSWORD = "correct-horse-battery-9"


def _code(device: TOTPDevice, ahead: int = 0) -> str:
    device.refresh_from_db()
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift + ahead)
    return f"{value:0{device.digits}d}"


@pytest.fixture
def sam():
    user = staff_user("sam", "supervisor", password=PASSWORD, email="sam@example.org")
    device = TOTPDevice.objects.create(user=user, name=mfa.AUTHENTICATOR, confirmed=True)
    recovery = mfa._recovery_codes_replace(user)
    return user, device, recovery


def _pending(client: Client, user: User) -> TOTPDevice:
    page = client.get("/accounts/profile/?replace=1")
    assert page.status_code == 200 and "<svg" in page.content.decode()
    return TOTPDevice.objects.get(user=user, confirmed=False)


def _staff_events(ddb, username: str) -> list[dict]:
    """The account's events other than its sign-ins (test_sign_in_lockout.py)."""
    return [
        e
        for e in audit_events(ddb)
        if e["stream"] == f"STAFF#{username}" and not e["action"].startswith("sign_in_")
    ]


def test_a_code_from_the_new_app_alone_replaces_nothing(ddb, sam):
    """A signed-in session (stolen) posts only a code from a new app, then with a wrong
    password, then with a wrong current code: each is refused and the authenticator,
    the other sessions, the trail and the mailbox are unchanged."""
    user, device, _ = sam
    thief = form_signed_in("sam", PASSWORD, address="10.3.3.3", otp_token=_code(device))
    new = _pending(thief, user)
    attempts = [
        {"otp_token": _code(new)},
        {"otp_token": _code(new), "password": "wrong-password-1", "current_token": _code(device)},
        {"otp_token": _code(new), "password": PASSWORD, "current_token": "12345678"},
    ]
    for form in attempts:
        refused = thief.post("/accounts/profile/authenticator/", form)
        assert refused.status_code == 400, form
        assert mfa.authenticator(user) == device
    assert not TOTPDevice.objects.get(pk=new.pk).confirmed
    assert [e["action"] for e in _staff_events(ddb, "sam")] == []
    assert mail.outbox == []


@pytest.mark.parametrize("current", ["app", "recovery"])
def test_replacement_with_password_and_current_code(ddb, sam, current):
    """Password, a code from the current app (or a recovery code) and one from the new
    app: the new authenticator replaces the old, every other session of the account is
    signed out (this one stays), the event is on the account's stream without the
    password or any code, and the account is told by e-mail."""
    user, device, recovery = sam
    other = form_signed_in("sam", PASSWORD, address="10.3.3.3", otp_token=_code(device))
    mine = form_signed_in("sam", PASSWORD, address="10.3.3.3", otp_token=_code(device, 1))
    new = _pending(mine, user)
    # As if the next 30-second step had come: the app's code now is not yet spent.
    TOTPDevice.objects.filter(pk=device.pk).update(last_t=-1)
    current_token = _code(device) if current == "app" else recovery[0]
    new_token = _code(new)
    done = mine.post(
        "/accounts/profile/authenticator/",
        {"password": PASSWORD, "current_token": current_token, "otp_token": new_token},
    )
    assert done.status_code == 200, done.content.decode()
    assert mfa.authenticator(user).pk == new.pk
    assert not TOTPDevice.objects.filter(pk=device.pk).exists()
    assert mine.get("/approvals/").status_code == 200
    ended = other.get("/approvals/")
    assert ended.status_code == 302 and ended["Location"].startswith("/accounts/login/")

    [event] = _staff_events(ddb, "sam")
    assert event["action"] == "mfa_replaced"
    assert event["actor"]["username"] == "sam"
    assert event["detail"]["other_sessions_ended"] == 1
    text = str(event)
    for secret in (PASSWORD, current_token, new_token, *recovery):
        assert secret not in text and secret.replace("-", "") not in text

    [message] = mail.outbox
    assert message.to == ["sam@example.org"]
    assert "authenticator" in message.subject.lower()
    for secret in (PASSWORD, current_token, new_token):
        assert secret not in message.body


def test_first_enrolment_still_needs_only_the_new_apps_code(ddb):
    """Without a current authenticator (after a supervisor's reset) there is nothing to
    prove possession of: the enrolment keeps needing only the new app's code."""
    user = staff_user("fin", "finance_staff", password=PASSWORD)
    client = Client()
    client.force_login(user)
    pending = _pending(client, user)
    done = client.post("/accounts/profile/authenticator/", {"otp_token": _code(pending)})
    assert done.status_code == 200 and mfa.authenticator(user).pk == pending.pk


def test_a_supervisors_reset_needs_their_password_and_code_and_signs_the_colleague_out(ddb, sam):
    """Removing a colleague's second factor from a (stolen) supervisor session alone is
    refused; with the supervisor's password and current code it removes it, signs out
    every session of the colleague, is audited and is e-mailed to the colleague."""
    user, device, _ = sam
    ann = staff_user("ann", "supervisor", password=PASSWORD, email="ann@example.org")
    ann_device = TOTPDevice.objects.create(user=ann, name=mfa.AUTHENTICATOR, confirmed=True)
    boss = form_signed_in("ann", PASSWORD, address="10.3.3.3", otp_token=_code(ann_device))
    colleague = form_signed_in("sam", PASSWORD, address="10.3.3.3", otp_token=_code(device))
    reason = "phone lost, confirmed by a call"
    url = "/accounts/staff/sam/reset-second-factor/"
    refused = boss.post(url, {"reason_text": reason})
    assert refused.status_code == 400 and mfa.authenticator(user) == device
    wrong = boss.post(url, {"reason_text": reason, "password": "nope-1", "current_token": "1"})
    assert wrong.status_code == 400 and mfa.authenticator(user) == device
    assert _staff_events(ddb, "sam") == [] and mail.outbox == []

    TOTPDevice.objects.filter(pk=ann_device.pk).update(last_t=-1)
    token = _code(ann_device)
    done = boss.post(url, {"reason_text": reason, "password": PASSWORD, "current_token": token})
    assert done.status_code == 200, done.content.decode()
    assert mfa.authenticator(user) is None
    ended = colleague.get("/accounts/profile/")
    assert ended.status_code == 302 and ended["Location"].startswith("/accounts/login/")
    [reset] = _staff_events(ddb, "sam")
    assert reset["action"] == "mfa_reset" and reset["detail"]["sessions_ended"] == 1
    assert PASSWORD not in str(reset) and token not in str(reset.get("detail"))
    [message] = mail.outbox
    assert message.to == ["sam@example.org"] and "second factor" in message.subject.lower()
