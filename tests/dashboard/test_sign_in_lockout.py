"""Sign-in failures: one message for every failed sign-in (so a failure never says which
part was wrong), wrong codes count toward the lockout, and the lockout is taken
atomically before any password or code is checked, so concurrent guesses get no more
checks than the limit."""

from __future__ import annotations

import re
import threading
import time

import pytest
from axes.handlers.proxy import AxesProxyHandler
from django.contrib.auth import authenticate
from django.contrib.auth.backends import ModelBackend
from django.test import Client, RequestFactory
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from dashboard.accounts import mfa
from tests.helpers import race, sign_in_form, staff_user

pytestmark = [pytest.mark.engines("moto")]

PASSWORD = "correct-horse-battery-9"


def _enrolled(name: str, role: str = "supervisor") -> TOTPDevice:
    user = staff_user(name, role, password=PASSWORD)
    return TOTPDevice.objects.create(user=user, name=mfa.AUTHENTICATOR, confirmed=True)


def _code(device: TOTPDevice) -> str:
    device.refresh_from_db()
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{value:0{device.digits}d}"


def _wrong(device: TOTPDevice) -> str:
    return "000000" if _code(device) != "000000" else "111111"


def _sign_in(name: str, password: str, token: str = "", address: str = "10.4.4.4"):
    return sign_in_form(Client(), name, password, otp_token=token, address=address)


def _messages(response) -> list[str]:
    return re.findall(r'<p class="error" role="alert">(.*?)</p>', response.content.decode(), re.S)


def _form_state(response) -> str:
    """The sign-in form as answered: the card, without the CSRF token."""
    page = response.content.decode()
    card = page[page.index('<section class="card narrow">') : page.index("</section>")]
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", card)


@pytest.mark.django_db
def test_every_failed_sign_in_answers_the_same(ddb):
    """Right password with a wrong code, no code, or a wrong password (with and without a
    code), an account without a device, and an unknown name: one status, one message,
    one form state, so the answer never tells a right password from a wrong one."""
    device = _enrolled("sam")
    staff_user("new", "supervisor", password=PASSWORD)  # required, no device yet
    answers = [
        _sign_in("sam", PASSWORD, _wrong(device), address="10.4.4.1"),
        _sign_in("sam", PASSWORD, "", address="10.4.4.2"),
        _sign_in("sam", "wrong-password-1", _wrong(device), address="10.4.4.3"),
        _sign_in("sam", "wrong-password-1", "", address="10.4.4.5"),
    ]
    for answer in answers:
        assert answer.status_code == 200
        assert _messages(answer) == _messages(answers[0])
        assert _form_state(answer) == _form_state(answers[0])
    [message] = _messages(answers[0])
    assert "Sign-in failed" in message
    others = [
        _sign_in("new", PASSWORD, "123456", address="10.4.4.6"),
        _sign_in("new", "wrong-password-1", "123456", address="10.4.4.7"),
        _sign_in("nobody", PASSWORD, "123456", address="10.4.4.8"),
    ]
    for answer in others:
        assert answer.status_code == 200 and _messages(answer) == [message]


@pytest.mark.django_db
def test_wrong_codes_count_toward_the_lockout(ddb, settings):
    """The right password with a wrong code, the limit's number of times, locks the
    account at that address: even the right code is then refused with the lockout."""
    device = _enrolled("sam")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in("sam", PASSWORD, _wrong(device))
    device.refresh_from_db()
    device.throttling_failure_count, device.throttling_failure_timestamp = 0, None
    device.save()
    locked = _sign_in("sam", PASSWORD, _code(device))
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content


@pytest.mark.django_db(transaction=True)
def test_concurrent_guesses_are_checked_at_most_the_limit(settings, monkeypatch):
    """Twenty wrong passwords for one user from one address, released together: at most
    the limit's number of them reach the password check; the rest are refused by the
    lockout without being checked."""
    staff_user("ada", "finance_staff", password=PASSWORD)
    checked = []
    real = ModelBackend.authenticate

    def slow_check(self, request, username=None, password=None, **kwargs):
        checked.append(username)
        time.sleep(0.2)  # a real hash takes this long: every guess is in flight at once
        return real(self, request, username=username, password=password, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", slow_check)
    # The test database (SQLite, shared in memory) refuses concurrent writers where a
    # server database would wait on the row lock: failures are recorded one at a time.
    recording = threading.Lock()
    record = AxesProxyHandler.user_login_failed.__func__

    def record_one_at_a_time(cls, *args, **kwargs):
        with recording:
            return record(cls, *args, **kwargs)

    monkeypatch.setattr(AxesProxyHandler, "user_login_failed", classmethod(record_one_at_a_time))

    def guess(n: int):
        request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="10.9.9.9")
        return authenticate(request, username="ada", password=f"guess-{n}")

    outcomes = race(*(lambda n=n: guess(n) for n in range(20)))
    assert all(outcome is None for outcome in outcomes), outcomes
    assert len(checked) <= settings.AXES_FAILURE_LIMIT, len(checked)
    # and the right password is refused too once the limit is spent
    request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="10.9.9.9")
    assert authenticate(request, username="ada", password=PASSWORD) is None


def _staff_actions(ddb, username: str) -> list[dict]:
    from tests.helpers import audit_events

    return [e for e in audit_events(ddb) if e["stream"] == f"STAFF#{username}"]


@pytest.mark.django_db
def test_sign_ins_failures_and_the_lockout_are_on_the_staff_stream(ddb, settings):
    """A success, a wrong code, a wrong password and the lockout they lead to are events
    on the account's STAFF# stream, in order, without the password or any code; a name
    that is no account writes nothing."""
    device = _enrolled("sam")
    good = _code(device)
    assert _sign_in("sam", PASSWORD, good).status_code == 302
    wrong = _wrong(device)
    _sign_in("sam", PASSWORD, wrong)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _sign_in("sam", "wrong-password-1")
    _sign_in("nobody", "wrong-password-1")
    events = _staff_actions(ddb, "sam")
    actions = [e["action"] for e in events]
    assert actions == [
        "sign_in_succeeded",
        "sign_in_failed",
        *["sign_in_failed"] * (settings.AXES_FAILURE_LIMIT - 1),
        "sign_in_locked_out",
    ]
    assert events[1]["detail"]["stage"] == "second_factor"
    assert events[2]["detail"]["stage"] == "password"
    assert events[0]["client_address"] == "10.4.4.4"
    text = str(events)
    assert PASSWORD not in text and "wrong-password-1" not in text
    for event in events:  # codes are digits: looked for where words are kept
        kept = str([event.get("detail"), event.get("reason_text"), event.get("after")])
        assert good not in kept and wrong not in kept
    assert _staff_actions(ddb, "nobody") == []
