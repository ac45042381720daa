"""Changing a staff member's password: on the profile with the current password and
Django's validators, in the administration screen, and with
``manage.py changepassword``. Each is a ``staff_password_set`` event on the account's STAFF# stream
(never the password), ends the account's other sessions and is e-mailed to the
account."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.management import call_command
from django.test import Client

from dashboard.accounts.models import StaffSession
from tests.helpers import audit_events, form_signed_in, pass_second_factor, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

PASSWORD = "correct-horse-battery-9"
NEW = "staple-lantern-orbit-42"
URL = "/accounts/profile/password/"


def _gone(client: Client) -> bool:
    answer = client.get("/accounts/profile/")
    return answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def _password_events(ddb, username: str) -> list[dict]:
    return [
        e
        for e in audit_events(ddb)
        if e["stream"] == f"STAFF#{username}" and e["action"] == "staff_password_set"
    ]


def _form(current: str, new: str, again: str | None = None) -> dict:
    return {"current_password": current, "new_password1": new, "new_password2": again or new}


@pytest.fixture
def ada():
    return staff_user("ada", "finance_staff", password=PASSWORD, email="ada@example.org")


def test_the_profile_offers_a_password_change(ddb, ada):
    """The profile page has the form: current password, the new one twice."""
    page = form_signed_in("ada", PASSWORD, address="10.4.4.1").get("/accounts/profile/")
    html = page.content.decode()
    assert f'action="{URL}"' in html
    for name in ("current_password", "new_password1", "new_password2"):
        assert f'name="{name}"' in html


@pytest.mark.parametrize(
    ("form", "says"),
    [
        (_form("wrong-password-1", NEW), "current password is not right"),
        (_form(PASSWORD, NEW, NEW + "x"), "two new passwords differ"),
        (_form(PASSWORD, "password"), "too common"),
        (_form(PASSWORD, "84736251930"), "entirely numeric"),
        (_form(PASSWORD, "ada"), "too short"),
    ],
)
def test_a_refused_change_changes_nothing(ddb, ada, form, says):
    """A wrong current password, two different new ones, or a new one Django's validators
    refuse: 400 saying why, the password, the sessions, the trail and the mailbox as
    they were."""
    other = form_signed_in("ada", PASSWORD, address="10.4.4.2")
    mine = form_signed_in("ada", PASSWORD, address="10.4.4.1")
    refused = mine.post(URL, form)
    assert refused.status_code == 400
    assert says in refused.content.decode()
    assert User.objects.get(username="ada").check_password(PASSWORD)
    assert not _gone(other) and not _gone(mine)
    assert _password_events(ddb, "ada") == [] and mail.outbox == []


def test_a_wrong_current_password_counts_toward_the_lockout(ddb, ada, settings):
    """The form cannot be used to guess the password: past the limit even the right
    current password is refused."""
    mine = form_signed_in("ada", PASSWORD, address="10.4.4.1")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        assert mine.post(URL, _form("wrong-password-1", NEW)).status_code == 400
    refused = mine.post(URL, _form(PASSWORD, NEW))
    assert refused.status_code == 400 and "Too many" in refused.content.decode()
    assert User.objects.get(username="ada").check_password(PASSWORD)


def test_changing_ones_password_is_audited_ends_the_others_and_is_mailed(ddb, ada):
    """The current password and a new one Django accepts: the password changes, this
    session stays, every other session of the account ends, a staff_password_set event
    (by the owner, how many ended; no password) is on the stream, and the account is
    told by e-mail."""
    other = form_signed_in("ada", PASSWORD, address="10.4.4.2")
    mine = form_signed_in("ada", PASSWORD, address="10.4.4.1")
    done = mine.post(URL, _form(PASSWORD, NEW), REMOTE_ADDR="10.4.4.1")
    assert done.status_code == 200, done.content.decode()
    assert "Your password is changed" in done.content.decode()
    assert User.objects.get(username="ada").check_password(NEW)
    assert mine.get("/accounts/profile/").status_code == 200
    assert _gone(other)
    assert StaffSession.objects.filter(user=ada).count() == 1

    [event] = _password_events(ddb, "ada")
    assert event["actor"]["username"] == "ada"
    assert event["detail"] == {
        "account": "ada",
        "via": "profile",
        "by": "owner",
        "other_sessions_ended": 1,
    }
    assert PASSWORD not in str(event) and NEW not in str(event)

    [message] = mail.outbox
    assert message.to == ["ada@example.org"] and "password" in message.subject.lower()
    assert "1 other session of your account was signed out" in message.body
    assert PASSWORD not in message.body and NEW not in message.body


def test_a_password_set_in_the_admin_ends_the_accounts_sessions_and_is_mailed(ddb, ada):
    """A superuser sets a colleague's password in the administration screen: every
    session of the colleague ends, the event says so, and the colleague is e-mailed."""
    colleague = form_signed_in("ada", PASSWORD, address="10.4.4.2")
    root = staff_user("root", "supervisor", email="root@example.org")
    root.is_superuser = root.is_staff = True
    root.save()
    admin = Client()
    admin.force_login(root)
    pass_second_factor(admin, root)
    done = admin.post(f"/admin/auth/user/{ada.pk}/password/", {"password1": NEW, "password2": NEW})
    assert done.status_code == 302, done.content.decode()
    assert User.objects.get(username="ada").check_password(NEW)
    assert _gone(colleague)
    [event] = _password_events(ddb, "ada")
    assert event["actor"]["username"] == "root"
    assert event["detail"] == {
        "account": "ada",
        "via": "admin",
        "by": "admin",
        "other_sessions_ended": 1,
    }
    [message] = mail.outbox
    assert message.to == ["ada@example.org"] and "password" in message.subject.lower()


def test_changepassword_is_audited_and_ends_every_session(ddb, ada, monkeypatch):
    """``manage.py changepassword ada``: an event with the system as actor, every session
    of the account ended, and the account e-mailed."""
    from django.contrib.auth.management.commands import changepassword

    session = form_signed_in("ada", PASSWORD, address="10.4.4.1")
    monkeypatch.setattr(changepassword.getpass, "getpass", lambda prompt="": NEW)
    call_command("changepassword", "ada")
    assert User.objects.get(username="ada").check_password(NEW)
    assert _gone(session)
    [event] = _password_events(ddb, "ada")
    assert event["actor"]["role"] == "system"
    assert event["detail"] == {
        "account": "ada",
        "via": "changepassword",
        "by": "system",
        "other_sessions_ended": 1,
    }
    [message] = mail.outbox
    assert message.to == ["ada@example.org"]


def test_a_superuser_setting_their_own_password_in_the_admin_keeps_this_session(ddb):
    """A superuser sets their own password in the administration screen: their other
    session ends, this one stays signed in and stays "this session" in the list."""
    root = staff_user("root", "supervisor", password=PASSWORD, email="root@example.org")
    root.is_superuser = root.is_staff = True
    root.save()
    other, admin = Client(), Client()
    for client in (other, admin):
        client.force_login(root)
        pass_second_factor(client, root)
        assert client.get("/accounts/profile/").status_code == 200
    done = admin.post(f"/admin/auth/user/{root.pk}/password/", {"password1": NEW, "password2": NEW})
    assert done.status_code == 302, done.content.decode()
    assert _gone(other)
    page = admin.get("/accounts/profile/")
    assert page.status_code == 200
    [this] = page.context["sessions"]
    assert this.current and this.created_at is not None  # its row followed the new key
    [event] = _password_events(ddb, "root")
    assert event["detail"]["by"] == "owner" and event["detail"]["other_sessions_ended"] == 1
