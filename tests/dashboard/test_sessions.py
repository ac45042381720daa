"""Sessions one can see and end: the profile lists the account's live sessions
(device, address, last seen, the current one marked); "Sign out the others" ends them
and keeps this one; a supervisor ends a colleague's from the staff page; every ending
and every sign-out is an event on the account's STAFF# stream; no other role may end
another's sessions."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from dashboard.accounts import staff_sessions
from dashboard.accounts.models import StaffSession
from tests.helpers import audit_events, form_signed_in, sign_in, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

PASSWORD = "correct-horse-battery-9"
# What the confirmation's form posts (the first post only asks).
CONFIRM = {"confirm": "True"}
FIREFOX = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0"
SAFARI = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
)


def _client(agent: str) -> Client:
    return Client(HTTP_USER_AGENT=agent)


def _events(ddb, username: str, action: str) -> list[dict]:
    return [
        e for e in audit_events(ddb) if e["stream"] == f"STAFF#{username}" and e["action"] == action
    ]


def _gone(client: Client) -> bool:
    answer = client.get("/accounts/profile/")
    return answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


@pytest.fixture
def ada():
    return staff_user("ada", "finance_staff", password=PASSWORD)


def test_the_profile_lists_both_sessions_and_marks_this_one(ddb, ada):
    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    phone = form_signed_in("ada", PASSWORD, agent=SAFARI, address="10.7.7.2")
    page = phone.get("/accounts/profile/", REMOTE_ADDR="10.7.7.2")
    assert page.status_code == 200
    listed = page.context["sessions"]
    assert [(s.device, s.address, s.current) for s in listed] == [
        ("Safari on iPhone", "10.7.7.2", True),
        ("Firefox on Windows", "10.7.7.1", False),
    ]
    assert all(s.last_seen is not None for s in listed)
    html = page.content.decode()
    assert "Firefox on Windows" in html and "Safari on iPhone" in html
    assert "this session" in html and "Sign out the others" in html
    assert StaffSession.objects.filter(user=ada).count() == 2
    assert "key" not in str(StaffSession.objects.values().first()).replace("key_hash", "")
    assert laptop.get("/accounts/profile/").status_code == 200


def test_sign_out_the_others_ends_the_other_and_keeps_this_one(ddb, ada):
    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    phone = form_signed_in("ada", PASSWORD, agent=SAFARI, address="10.7.7.2")
    # Without the CSRF token the form is refused (the page's form carries it).
    strict = _client(SAFARI)
    strict.cookies = phone.cookies
    strict.handler.enforce_csrf_checks = True
    assert strict.post("/accounts/profile/sessions/end-others/").status_code == 403
    assert not _gone(laptop)

    done = phone.post("/accounts/profile/sessions/end-others/", CONFIRM)
    assert done.status_code == 200
    assert "1 other session of your account was signed out" in done.content.decode()
    assert [s.current for s in done.context["sessions"]] == [True]
    assert _gone(laptop)
    assert phone.get("/accounts/profile/").status_code == 200

    [event] = _events(ddb, "ada", "sessions_ended")
    assert event["actor"]["username"] == "ada"
    assert event["detail"]["sessions_ended"] == 1
    assert event["detail"]["by"] == "owner" and event["detail"]["current_kept"] is True


def test_a_supervisor_ends_a_staff_members_sessions(ddb, ada, client):
    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    phone = form_signed_in("ada", PASSWORD, agent=SAFARI, address="10.7.7.2")
    sign_in(client, "supervisor", "sam")
    page = client.get("/accounts/staff/")
    [row] = [r for r in page.context["rows"] if r.user.username == "ada"]
    assert row.sessions == 2

    done = client.post("/accounts/staff/ada/end-sessions/", CONFIRM)
    assert done.status_code == 200
    assert done.context["done"] == "2 of ada's sessions signed out."
    assert _gone(laptop) and _gone(phone)
    assert client.get("/accounts/staff/").status_code == 200  # the supervisor's stays
    assert staff_sessions.live_sessions(ada) == []

    [event] = _events(ddb, "ada", "sessions_ended")
    assert event["actor"]["username"] == "sam" and event["actor"]["role"] == "supervisor"
    assert event["detail"] == {
        "account": "ada",
        "sessions_ended": 2,
        "by": "supervisor",
        "current_kept": False,
    }


@pytest.mark.parametrize("role", ["finance_staff", "auditor"])
def test_no_other_role_may_end_anothers_sessions(ddb, ada, client, role):
    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    sign_in(client, role, "eve")
    assert client.post("/accounts/staff/ada/end-sessions/").status_code == 403
    assert not _gone(laptop)
    assert _events(ddb, "ada", "sessions_ended") == []


def test_signing_out_is_an_event_and_leaves_the_list(ddb, ada):
    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    phone = form_signed_in("ada", PASSWORD, agent=SAFARI, address="10.7.7.2")
    assert laptop.post("/accounts/logout/", REMOTE_ADDR="10.7.7.1").status_code in (200, 302)
    [event] = _events(ddb, "ada", "signed_out")
    assert event["detail"]["how"] == "sign_out"
    assert event["client_address"] == "10.7.7.1"
    listed = phone.get("/accounts/profile/").context["sessions"]
    assert [s.device for s in listed] == ["Safari on iPhone"]
    assert StaffSession.objects.filter(user=ada).count() == 1


def test_device_words():
    assert staff_sessions.device_words(FIREFOX) == "Firefox on Windows"
    assert staff_sessions.device_words(SAFARI) == "Safari on iPhone"
    assert staff_sessions.device_words("curl/8.5.0") == "curl"
    assert staff_sessions.device_words("") == "Unknown device"


def test_a_session_the_idle_timeout_ends_is_a_signed_out_event(ddb, ada, settings):
    from dashboard.auth import SESSION_SEEN

    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    session = laptop.session
    session[SESSION_SEEN] = session[SESSION_SEEN] - settings.SESSION_IDLE_TIMEOUT_S - 5
    session.save()
    assert _gone(laptop)
    [event] = _events(ddb, "ada", "signed_out")
    assert event["detail"]["how"] == "ended_by_server"
    assert StaffSession.objects.filter(user=ada).count() == 0


def test_passkey_presses_before_sign_in_leave_no_session_behind(ddb, ada):
    """Twelve presses of "Sign in with a passkey" from twelve fresh browsers, none of them
    signing in: no Django session row, no staff session, and nobody's session list or
    the staff page's counts change; the one who signs in afterwards is the only session."""
    from django.contrib.sessions.models import Session

    for _ in range(12):
        press = _client(FIREFOX)
        answer = press.post("/accounts/login/passkey/")
        assert answer.status_code == 200 and answer.json()["challenge"]
    assert Session.objects.count() == 0
    assert StaffSession.objects.count() == 0
    assert staff_sessions.live_session_counts() == {}

    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    assert [s.current for s in laptop.get("/accounts/profile/").context["sessions"]] == [True]
    assert Session.objects.count() == 1 and StaffSession.objects.count() == 1


def test_signing_out_sessions_asks_first_and_ends_nothing_until_confirmed(ddb, ada, client):
    """ "Sign out all" on the staff page, and "Sign out the others" on the profile, post a
    plain form (no script): the answer asks, naming whose sessions and which, and ends
    nothing; its own form posts the confirmation, which ends them. Cancel goes back."""
    laptop = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.1")
    sign_in(client, "supervisor", "sam")
    asked = client.post("/accounts/staff/ada/end-sessions/")
    html = asked.content.decode()
    assert asked.status_code == 200 and not _gone(laptop)
    assert "Sign out every session of ada?" in html and "Firefox on Windows" in html
    form = re.search(r'<form method="post" action="([^"]+)".*?</form>', html, re.S)
    assert form[1] == "/accounts/staff/ada/end-sessions/"
    assert 'name="confirm" value="True"' in form[0] and ">Sign out all 1</button>" in form[0]
    assert '<a href="/accounts/staff/">Cancel, keep them signed in</a>' in form[0]
    assert _events(ddb, "ada", "sessions_ended") == []
    done = client.post("/accounts/staff/ada/end-sessions/", CONFIRM)
    assert done.context["done"] == "1 of ada's session signed out." and _gone(laptop)

    phone = form_signed_in("ada", PASSWORD, agent=SAFARI, address="10.7.7.2")
    other = form_signed_in("ada", PASSWORD, agent=FIREFOX, address="10.7.7.3")
    own = phone.post("/accounts/profile/sessions/end-others/").content.decode()
    assert "Sign out your other sessions?" in own and not _gone(other)
    assert "Firefox on Windows" in own and "Safari on iPhone" not in own
    phone.post("/accounts/profile/sessions/end-others/", CONFIRM)
    assert _gone(other) and not _gone(phone)
