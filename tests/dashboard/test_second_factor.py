"""The second factor of staff sign-in (docs/design.md §11): TOTP for supervisors and auditors,
recovery codes, a supervisor's audited reset, and account changes in the audit trail.

The test settings are production's (``DJANGO_DEBUG=0``), so the requirement is on unless
a test turns it off. These tests exercise no engine semantics: one engine.
"""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from dashboard.accounts import account_changes, mfa
from tests.helpers import audit_events, pass_second_factor, sign_in_form, staff_user

pytestmark = [pytest.mark.engines("moto"), pytest.mark.django_db]

PASSWORD = "correct-horse-battery-9"


def staff(name: str, role: str) -> User:
    return staff_user(name, role, password=PASSWORD)


def enrol(user: User) -> TOTPDevice:
    return TOTPDevice.objects.create(user=user, name=mfa.AUTHENTICATOR, confirmed=True)


def unthrottle(device) -> None:
    """As if the wait after a wrong code had passed (1 s after one failure)."""
    device.refresh_from_db()
    device.throttling_failure_count = 0
    device.throttling_failure_timestamp = None
    device.save()


def code(device: TOTPDevice, *, ahead: int = 0) -> str:
    """The app's code now (``ahead`` steps later: a code not yet spent)."""
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift + ahead)
    return f"{value:0{device.digits}d}"


def sign_in(client: Client, name: str, token: str = "", password: str = PASSWORD):
    """The sign-in form with a code field, empty unless ``token`` is given."""
    return sign_in_form(client, name, password, otp_token=token, address="10.2.2.2")


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def confirmed(device, **form) -> dict:
    """A reset form with the resetting supervisor's own password and current code (a
    session alone cannot remove anyone's second factor)."""
    return {"password": PASSWORD, "current_token": code(device), **form}


def staff_stream(ddb, username: str) -> list[dict]:
    return [e for e in audit_events(ddb) if e["stream"] == f"STAFF#{username}"]


# --- sign-in -----------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["supervisor", "auditor"])
def test_approvers_and_auditors_need_the_code_as_well_as_the_password(ddb, role):
    """A stolen password alone opens nothing: without the code, or with a wrong one, the
    sign-in is refused; with the app's code it succeeds and the session is verified."""
    device = enrol(staff("sam", role))
    client = Client()
    refused = sign_in(client, "sam")
    assert refused.status_code == 200 and not signed_in(client)
    assert "Sign-in failed" in refused.content.decode()  # the one message of every failure
    wrong = sign_in(client, "sam", "000000" if code(device) != "000000" else "111111")
    assert not signed_in(client) and "Sign-in failed" in wrong.content.decode()
    unthrottle(device)
    assert sign_in(client, "sam", code(device)).status_code == 302
    assert signed_in(client) and "otp_device_id" in client.session
    assert client.get("/audit/").status_code == 200


def test_a_spent_code_does_not_sign_in_twice(ddb):
    """A code seen on the wire (shoulder-surfed, proxied) cannot be replayed."""
    device = enrol(staff("sam", "supervisor"))
    token = code(device)
    assert sign_in(Client(), "sam", token).status_code == 302
    second = Client()
    sign_in(second, "sam", token)
    assert not signed_in(second)


def test_guessing_codes_is_throttled(ddb, settings):
    """After a wrong code the device refuses even the right one for a while (django-otp
    doubles the wait after each failure), with the one failed-sign-in message."""
    settings.OTP_TOTP_THROTTLE_FACTOR = 60  # a wait no slow test machine outlasts
    device = enrol(staff("sam", "supervisor"))
    client = Client()
    sign_in(client, "sam", "999999" if code(device) != "999999" else "888888")
    again = sign_in(client, "sam", code(device, ahead=1))
    assert not signed_in(client)
    assert "Sign-in failed" in again.content.decode()


def test_a_recovery_code_signs_in_once(ddb):
    user = staff("sam", "auditor")
    enrol(user)
    codes = mfa._recovery_codes_replace(user)
    assert len(codes) == 10 and len(set(codes)) == 10
    assert sign_in(Client(), "sam", codes[3].upper()).status_code == 302  # as typed
    again = Client()
    sign_in(again, "sam", codes[3])
    assert not signed_in(again)
    assert mfa.status(user).recovery_codes_left == 9


def test_a_required_role_without_any_device_is_told_what_to_do(ddb):
    staff("sam", "supervisor")
    client = Client()
    page = sign_in(client, "sam", "123456").content.decode()
    assert not signed_in(client)
    assert "Ask a supervisor to reset it" in page


def test_finance_staff_may_enrol_and_then_must_use_it(ddb):
    staff("fin", "finance_staff")
    assert sign_in(Client(), "fin").status_code == 302  # optional for the role
    device = enrol(User.objects.get(username="fin"))
    client = Client()
    sign_in(client, "fin")
    assert not signed_in(client)
    assert sign_in(client, "fin", code(device)).status_code == 302


def test_without_the_requirement_approvers_sign_in_with_a_password(ddb, settings):
    settings.STAFF_MFA_REQUIRED = False
    staff("sam", "supervisor")
    client = Client()
    assert sign_in(client, "sam").status_code == 302
    assert client.get("/approvals/").status_code == 200


def test_a_session_without_the_second_factor_is_signed_out(ddb):
    """A session opened before the requirement was switched on (or forged without the
    code) reaches no page: its first request signs it out."""
    user = staff("sam", "supervisor")
    client = Client()
    client.force_login(user)
    response = client.get("/approvals/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not signed_in(client)
    # htmx requests are told where to go rather than handed the sign-in page as a fragment.
    client.force_login(user)
    partial = client.get("/approvals/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 204 and partial["HX-Redirect"] == "/accounts/login/"


# --- enrolment, recovery codes, reset ----------------------------------------------------


def test_reset_hands_out_a_one_time_code_that_opens_only_enrolment(ddb):
    """Supervisor ann resets sam's lost phone (audited, with the reason). Sam signs in
    with the password and that code, is held on the profile page until a new app is
    enrolled, gets recovery codes, and can then approve. The code works once."""
    sam, ann = staff("sam", "supervisor"), staff("ann", "supervisor")
    enrol(sam)
    boss = Client()
    boss.force_login(ann)
    mine = pass_second_factor(boss, ann)
    page = boss.post(
        "/accounts/staff/sam/reset-second-factor/",
        confirmed(mine, reason_text="phone lost, confirmed by a call"),
    ).content.decode()
    handed = re.search(r'class="mono code-once">([a-z2-7]{5}-[a-z2-7]{5})<', page).group(1)
    assert mfa.authenticator(sam) is None
    [reset] = staff_stream(ddb, "sam")
    assert reset["action"] == "mfa_reset" and reset["actor"]["username"] == "ann"
    assert reset["reason_text"] == "phone lost, confirmed by a call"
    assert handed.replace("-", "") not in str(reset)  # the code is not in the trail

    client = Client()
    assert sign_in(client, "sam", handed).status_code == 302
    held = client.get("/approvals/")
    assert held.status_code == 302 and held["Location"] == "/accounts/profile/"
    profile = client.get("/accounts/profile/").content.decode()
    assert "Set up your authenticator app" in profile and "<svg" in profile
    pending = TOTPDevice.objects.get(user=sam, confirmed=False)
    wrong = client.post("/accounts/profile/authenticator/", {"otp_token": "12345"})
    assert wrong.status_code == 400
    unthrottle(pending)
    done = client.post("/accounts/profile/authenticator/", {"otp_token": code(pending)})
    codes = re.findall(r"<li>([a-z2-7]{5}-[a-z2-7]{5})</li>", done.content.decode())
    assert done.status_code == 200 and len(codes) == 10
    assert "no-store" in done["Cache-Control"]
    assert client.get("/approvals/").status_code == 200
    assert [e["action"] for e in staff_stream(ddb, "sam")] == [
        "mfa_reset",
        "sign_in_succeeded",  # with the enrolment code
        "mfa_enrolled",
    ]
    replay = Client()
    sign_in(replay, "sam", handed)
    assert not signed_in(replay)


def test_nobody_resets_their_own_second_factor_and_staff_cannot_reset(ddb):
    ann, fin = staff("ann", "supervisor"), staff("fin", "finance_staff")
    mine = enrol(ann)
    boss = Client()
    boss.force_login(ann)
    pass_second_factor(boss, ann)
    own = boss.post(
        "/accounts/staff/ann/reset-second-factor/",
        confirmed(mine, reason_text="testing my own reset"),
    )
    assert own.status_code == 409 and "A different supervisor" in own.content.decode()
    assert mfa.authenticator(ann) is not None
    blank = boss.post(
        "/accounts/staff/fin/reset-second-factor/", confirmed(mine, reason_text="\u200b" * 12)
    )
    assert blank.status_code == 400
    assert boss.post("/accounts/staff/nobody/reset-second-factor/", {}).status_code == 404
    clerk = Client()
    clerk.force_login(fin)
    assert clerk.get("/accounts/staff/").status_code == 403
    assert clerk.post("/accounts/staff/ann/reset-second-factor/").status_code == 403
    assert staff_stream(ddb, "ann") == [] and staff_stream(ddb, "fin") == []


def test_new_recovery_codes_need_the_app_and_replace_the_old(ddb):
    user = staff("aud", "auditor")
    device = enrol(user)
    old = mfa._recovery_codes_replace(user)
    client = Client()
    client.force_login(user)
    pass_second_factor(client, user)
    refused = client.post("/accounts/profile/recovery-codes/", {"recovery-otp_token": "1"})
    assert refused.status_code == 400
    unthrottle(device)
    fresh = client.post(
        "/accounts/profile/recovery-codes/", {"recovery-otp_token": code(device, ahead=1)}
    )
    new = re.findall(r"<li>([a-z2-7]{5}-[a-z2-7]{5})</li>", fresh.content.decode())
    assert len(new) == 10 and not set(new) & set(old)
    assert mfa.device_for_token(user, old[0]) is None
    assert [e["action"] for e in staff_stream(ddb, "aud")] == ["recovery_codes_issued"]


def test_an_account_change_the_audit_trail_refuses_does_not_happen(ddb, monkeypatch):
    """DynamoDB down: the reset is not applied and the page says so (503, no 500)."""
    from botocore.exceptions import EndpointConnectionError

    sam, ann = staff("sam", "supervisor"), staff("ann", "supervisor")
    enrol(sam)
    boss = Client()
    boss.force_login(ann)
    mine = pass_second_factor(boss, ann)

    def unreachable(*args, **kwargs):
        raise EndpointConnectionError(endpoint_url="http://dynamodb")

    monkeypatch.setattr(account_changes, "account_event_append", unreachable)
    response = boss.post(
        "/accounts/staff/sam/reset-second-factor/",
        confirmed(mine, reason_text="phone lost again"),
    )
    assert response.status_code == 503
    assert "nothing was changed" in response.content.decode()
    assert mfa.authenticator(sam) is not None


# --- add_staff ---------------------------------------------------------------------------


def _add_staff(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("add_staff", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_add_staff_enrols_approvers_and_records_every_account_change(ddb):
    """A new supervisor gets an authenticator whose URI is the last line; a role change
    and a password reset are audit events with before and after; the reset ends the
    account's sessions."""
    lines = _add_staff("sam", "--role", "supervisor", "--email", "sam@example.org")
    assert lines[-1].startswith("otpauth://totp/") and "secret=" in lines[-1]
    assert lines[-2].startswith("recovery codes for sam: ")
    device = mfa.authenticator(User.objects.get(username="sam"))
    password = next(line for line in lines if line.startswith("password for sam: "))
    client = Client()
    assert sign_in(client, "sam", code(device), password.split(": ", 1)[1]).status_code == 302

    assert _add_staff("sam", "--role", "auditor", "--password", "Another-pass-77")[-1] == (
        "updated sam in group auditor"
    )  # enrolled already: no new URI
    events = staff_stream(ddb, "sam")
    assert [e["action"] for e in events] == [
        "staff_created",
        "mfa_enrolled",
        "sign_in_succeeded",
        "staff_role_changed",
        "staff_password_set",
    ]
    change = events[3]
    assert change["before"] == {"role": "supervisor", "active": True}
    assert change["after"] == {"role": "auditor", "active": True}
    assert change["actor"]["role"] == "system"
    assert change["client_address"].startswith("manage.py add_staff")
    assert "Another-pass-77" not in str(events)
    # A password set anew ends the account's sessions, as every way of setting one does.
    assert events[4]["detail"]["other_sessions_ended"] == 1
    assert events[4]["detail"]["via"] == "add_staff"
    assert client.get("/accounts/profile/").status_code == 302


def test_add_staff_for_finance_staff_prints_no_uri(ddb):
    lines = _add_staff("fin", "--role", "finance_staff")
    assert lines[-1].startswith("password for fin: ")
    assert mfa.authenticator(User.objects.get(username="fin")) is None
    new = _add_staff("fin", "--role", "finance_staff", "--new-authenticator")
    assert new[-1].startswith("otpauth://totp/")


def test_add_staff_changes_nothing_when_the_audit_trail_is_down(ddb, monkeypatch):
    from botocore.exceptions import EndpointConnectionError
    from django.core.management import CommandError

    import dashboard.accounts.management.commands.add_staff as command

    def unreachable(*args, **kwargs):
        raise EndpointConnectionError(endpoint_url="http://dynamodb")

    monkeypatch.setattr(command, "account_event_append", unreachable)
    with pytest.raises(CommandError, match="nothing was changed"):
        _add_staff("eve", "--role", "supervisor")
    assert not User.objects.filter(username="eve").exists()


# --- /accounts/staff/ --------------------------------------------------------------------


def test_the_staff_page_shows_roles_and_second_factors(ddb):
    ann, sam = staff("ann", "supervisor"), staff("sam", "auditor")
    enrol(ann)
    staff("fin", "finance_staff")
    boss = Client()
    boss.force_login(ann)
    pass_second_factor(boss, ann)
    page = boss.get("/accounts/staff/").content.decode()
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)[1:]
    assert [re.search(r"<td>(\w+)", r).group(1) for r in rows] == ["ann", "fin", "sam"]
    assert "another supervisor resets yours" in rows[0]
    assert "Not enrolled" in rows[2] and "required" in rows[2]
    assert sam.username in page


def _reset_offered(page: str, username: str) -> bool:
    return f'action="/accounts/staff/{username}/reset-second-factor/"' in page


def test_staff_page_offers_a_reset_only_to_accounts_with_a_second_factor(ddb):
    """The staff page offers "Reset" for an account with an authenticator or a passkey,
    and for one with neither says there is nothing to reset instead."""
    from tests.dashboard.test_passkeys import _passkey

    ann = staff("ann", "supervisor")
    enrol(staff("app", "supervisor"))
    _passkey(staff("key", "auditor"))
    staff("none", "finance_staff")
    boss = Client()
    boss.force_login(ann)
    pass_second_factor(boss, ann)
    page = boss.get("/accounts/staff/").content.decode()
    assert _reset_offered(page, "app") and _reset_offered(page, "key")
    assert not _reset_offered(page, "none")
    assert "Nothing to reset: no authenticator or passkey" in page
    assert "<td>1 passkey" in page


def _sections(html: str) -> list[str]:
    """The ids of the profile's section headings, in page order."""
    return re.findall(r'<section class="card[^"]*" aria-labelledby="([\w-]+)"', html)


def test_recovery_codes_come_first_on_the_page_that_shows_them(ddb):
    """Setting up the authenticator answers with the ten codes shown only now as the
    first section, above the account, sessions and password; new codes issued later
    are shown first too."""
    user = staff("fin", "finance_staff")
    client = Client()
    client.force_login(user)
    assert client.get("/accounts/profile/").status_code == 200
    pending = TOTPDevice.objects.get(user=user, confirmed=False)
    done = client.post("/accounts/profile/authenticator/", {"otp_token": code(pending)})
    html = done.content.decode()
    sections = _sections(html)
    assert sections[0] == "codes-h", sections
    assert {"sessions-h", "password-h", "manage-h"} <= set(sections[1:])
    assert html.index('id="codes-h"') < html.index("<dt>Username</dt>")
    assert len(re.findall(r"<li>([a-z2-7]{5}-[a-z2-7]{5})</li>", html)) == 10

    unthrottle(pending)
    fresh = client.post(
        "/accounts/profile/recovery-codes/", {"recovery-otp_token": code(pending, ahead=1)}
    )
    assert _sections(fresh.content.decode())[0] == "codes-h"
