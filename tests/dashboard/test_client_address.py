"""The client's address behind a trusted proxy (``TRUSTED_PROXY_COUNT``): sign-in
lockout and audit events key on the address the outermost trusted proxy saw, taken from
the right of ``X-Forwarded-For``; without the setting the header is ignored, so nobody can
choose their own address, and behind the proxy nobody can lock a colleague out."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from tests.helpers import sign_in_form, staff_user

PASSWORD = "correct-Horse-battery-9"
PROXY = "10.9.9.9"  # every request reaches Django from the proxy


def _user(name: str = "ada") -> User:
    return staff_user(name, "finance_staff", password=PASSWORD)


def _sign_in(password: str, forwarded: str | None, remote: str = PROXY):
    """ada signs in on a new client, through the proxy."""
    return sign_in_form(Client(), "ada", password, address=remote, forwarded=forwarded)


@pytest.mark.django_db
def test_behind_the_proxy_one_clients_failures_do_not_lock_out_another(settings):
    """Two clients behind one proxy, with different X-Forwarded-For: the first one's
    failures lock ada out from the first client only; the second signs in as ada."""
    settings.TRUSTED_PROXY_COUNT = 1
    _user("ada")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in("wrong-password", "203.0.113.5")
    assert _sign_in(PASSWORD, "203.0.113.5").status_code == 429
    assert _sign_in(PASSWORD, "198.51.100.7").status_code == 302


@pytest.mark.django_db
def test_behind_the_proxy_a_forged_left_entry_does_not_escape_the_lockout(settings):
    """The attacker writes their own X-Forwarded-For; the proxy appends the address it
    saw. Only the proxy's entry counts, so changing the forged part changes nothing."""
    settings.TRUSTED_PROXY_COUNT = 1
    _user("ada")
    for n in range(settings.AXES_FAILURE_LIMIT):
        _sign_in("wrong-password", f"192.0.2.{n}, 203.0.113.5")
    assert _sign_in(PASSWORD, "192.0.2.200, 203.0.113.5").status_code == 429


@pytest.mark.django_db
def test_without_the_setting_the_header_is_ignored(settings):
    """TRUSTED_PROXY_COUNT 0 (the default without DJANGO_BEHIND_PROXY): X-Forwarded-For
    is ignored, so varying it does not escape a lockout, and REMOTE_ADDR decides."""
    settings.TRUSTED_PROXY_COUNT = 0
    _user("ada")
    for n in range(settings.AXES_FAILURE_LIMIT):
        _sign_in("wrong-password", f"203.0.113.{n}", remote="10.0.0.9")
    assert _sign_in(PASSWORD, "198.51.100.7", remote="10.0.0.9").status_code == 429
    assert _sign_in(PASSWORD, "198.51.100.7", remote="10.0.0.10").status_code == 302


@pytest.mark.parametrize(
    ("count", "forwarded", "expected"),
    [
        (0, "203.0.113.5", PROXY),
        (1, None, PROXY),
        (1, "203.0.113.5", "203.0.113.5"),
        (1, "192.0.2.1, 203.0.113.5", "203.0.113.5"),
        (1, "192.0.2.1,203.0.113.5 ", "203.0.113.5"),
        (2, "192.0.2.1, 203.0.113.5, 10.1.1.1", "203.0.113.5"),
        (2, "203.0.113.5", PROXY),  # fewer entries than proxies: not through the chain
        (1, "not-an-address", PROXY),
        (1, "2001:db8::1", "2001:db8::1"),
    ],
)
def test_client_address_takes_the_entry_the_outermost_trusted_proxy_added(
    settings, count, forwarded, expected
):
    """With N trusted proxies the client is the N-th entry from the right; a missing,
    short or malformed header falls back to REMOTE_ADDR."""
    from dashboard.auth import client_address

    settings.TRUSTED_PROXY_COUNT = count
    extra = {"REMOTE_ADDR": PROXY}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    assert client_address(RequestFactory().get("/", **extra)) == expected


@pytest.mark.engines("moto")
def test_api_audit_events_carry_the_client_address_and_the_request_id(ddb, api, settings):
    """Behind the proxy the intake API records the client's address, as sign-in does, and
    the request's correlation id is the one the middleware answers with."""
    from tests.conftest import pledge_body
    from tests.helpers import audit_events

    settings.TRUSTED_PROXY_COUNT = 1
    response = api.post(
        "addr-1",
        pledge_body(),
        REMOTE_ADDR=PROXY,
        HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7",
        HTTP_X_REQUEST_ID="req-0000-addr-1",
    )
    assert response.status_code == 201
    [event] = [e for e in audit_events(ddb) if e["action"] == "pledge_recorded"]
    assert event["client_address"] == "203.0.113.7"
    assert event["correlation_id"] == response["X-Request-ID"] == "req-0000-addr-1"
