"""Rotating a webhook endpoint's signing secret: ``rotate_webhook_secret E7``
and the admin's "Rotate signing secret" button give a new secret, shown once and audited
by its last characters; deliveries are then signed with both secrets for
``WEBHOOK_PREVIOUS_SECRET_S``, and with the new one alone after."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError
from django.core.management import CommandError, call_command
from standardwebhooks.webhooks import Webhook

from dashboard.tenancy import tenant_changes
from dashboard.tenancy.models import WebhookEndpoint
from dashboard.tenancy.tenant_changes import webhook_register
from reconciliation import clock
from reconciliation.acks.models import SECRET_PREFIX, AttemptResult
from tests.conftest import pledge_body, staff_actor
from tests.dashboard.dispatch import dispatch_acks
from tests.dashboard.test_labels import visible_text
from tests.helpers import audit_events, pass_second_factor, staff_user

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto"), pytest.mark.usefixtures("midday")]

URL = "https://crm.example.org/hooks"
DAY = 86400


def register() -> WebhookEndpoint:
    return webhook_register("acme", URL, events=("pledge.recorded",), actor=staff_actor())


def rotate(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("rotate_webhook_secret", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def rotations(ddb) -> list[dict]:
    return [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "webhook_secret_rotated"]


@pytest.mark.parametrize("written", ["E{pk}", "{pk}"])
def test_the_command_prints_the_new_secret_once_and_audits_its_last_characters(ddb, written):
    """``E7`` or ``7``: the last line is the new ``whsec_`` secret the row now signs with;
    the old one is kept as the previous secret for a day; the audit event names both by
    their last four characters and no secret appears in the trail."""
    endpoint = register()
    old = endpoint.secret
    lines = rotate(written.format(pk=endpoint.pk))
    new = lines[-1]
    assert new.startswith(SECRET_PREFIX) and new != old
    assert old not in "\n".join(lines) and new not in "\n".join(lines[:-1])
    endpoint.refresh_from_db()
    assert (endpoint.secret, endpoint.previous_secret) == (new, old)
    assert endpoint.previous_secret_until is not None
    assert abs(endpoint.previous_secret_until - (clock.now() + timedelta(days=1))) < timedelta(
        seconds=60
    )
    [event] = rotations(ddb)
    assert (event["before"], event["after"]) == (
        {"url": URL, "secret": "…" + old[-4:]},
        {"url": URL, "secret": "…" + new[-4:]},
    )
    assert event["detail"]["endpoint"] == f"E{endpoint.pk}"
    assert event["actor"]["role"] == "system"
    trail = str(audit_events(ddb))
    assert old not in trail and new not in trail


def test_an_unknown_or_malformed_endpoint_changes_nothing(ddb):
    """No such endpoint, or not an id: refused, nothing rotated or audited."""
    endpoint = register()
    for wrong in (f"E{endpoint.pk + 1}", "X7", "E", "7; drop"):
        with pytest.raises(CommandError):
            rotate(wrong)
    endpoint.refresh_from_db()
    assert endpoint.previous_secret == "" and rotations(ddb) == []


def signatures_sent(api, key: str) -> list[str]:
    """Record one pledge, dispatch what is due now, and return each attempt's
    ``webhook-signature`` header split into its signatures."""
    assert api.post(key, pledge_body()).status_code == 201
    seen: list[dict[str, str]] = []

    def send(target, *, headers, body, **kwargs) -> AttemptResult:
        seen.append({**headers, "body": body.decode()})
        return AttemptResult(200)

    dispatch_acks(send)
    [headers] = seen
    return [headers["webhook-signature"], headers["webhook-id"], headers["webhook-timestamp"]] + [
        headers["body"]
    ]


def expected(secret: str, sent: list[str]) -> str:
    _, msg_id, timestamp, body = sent
    at = datetime.fromtimestamp(int(timestamp), UTC)
    return Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=body.encode())


def test_deliveries_are_signed_with_both_secrets_for_a_day_then_with_the_new_one(ddb, api):
    """Before a rotation: one signature. After it: ``v1,<new> v1,<old>``, each the
    library's signature by that secret. A day later: the new one alone."""
    endpoint = register()
    old = endpoint.secret
    before = signatures_sent(api, "rot-1")
    assert before[0] == expected(old, before)

    new = rotate(f"E{endpoint.pk}")[-1]
    during = signatures_sent(api, "rot-2")
    assert during[0].split(" ") == [expected(new, during), expected(old, during)]

    with clock.travel(DAY - 120):
        still = signatures_sent(api, "rot-3")
    assert still[0].split(" ") == [expected(new, still), expected(old, still)]
    with clock.travel(DAY + 60):
        after = signatures_sent(api, "rot-4")
    assert after[0] == expected(new, after)


def superuser_client(client):
    user = staff_user("root", "supervisor")
    user.is_superuser = user.is_staff = True
    user.save()
    client.force_login(user)
    pass_second_factor(client, user)
    return client


def test_the_admin_rotates_after_a_confirmation_and_shows_the_secret_once(ddb, client):
    """The endpoint's page links to the rotation; its GET asks to confirm and changes
    nothing; the POST rotates (audited, as the superuser), answers with the new secret,
    not to be cached; neither the endpoint page nor the list shows it afterwards; the
    audit page names the event in words."""
    endpoint = register()
    old = endpoint.secret
    admin = superuser_client(client)
    change = f"/admin/tenancy/webhookendpoint/{endpoint.pk}/change/"
    rotate_url = f"/admin/tenancy/webhookendpoint/{endpoint.pk}/rotate/"

    page = admin.get(change)
    assert page.status_code == 200 and rotate_url in page.content.decode()
    confirm = admin.get(rotate_url)
    assert confirm.status_code == 200
    assert "Rotate signing secret" in visible_text(confirm.content.decode())
    assert old not in confirm.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.secret == old and rotations(ddb) == []

    answer = admin.post(rotate_url)
    assert answer.status_code == 200
    endpoint.refresh_from_db()
    new = endpoint.secret
    assert new != old and endpoint.previous_secret == old
    html = answer.content.decode()
    assert html.count(new) == 1 and old not in html
    assert "no-store" in answer["Cache-Control"]
    [event] = rotations(ddb)
    assert event["actor"]["username"] == "root" and event["actor"]["role"] == "admin"

    for later in (admin.get(change), admin.get("/admin/tenancy/webhookendpoint/")):
        text = later.content.decode()
        assert later.status_code == 200 and new not in text and old not in text
        assert new[-4:] in text
    assert "also signs until" in visible_text(admin.get(change).content.decode())

    audit_page = admin.get("/audit/", {"action": "webhook_secret_rotated"})
    assert audit_page.status_code == 200
    [row] = audit_page.context["page"].rows
    assert row.action == "webhook_secret_rotated"
    # The row's cell, not the action filter's list of every label.
    cells = visible_text(audit_page.content.decode().split("<tbody", 1)[1])
    assert "Webhook signing secret rotated" in cells
    assert f"Signing secret of {URL}: …{old[-4:]} → …{new[-4:]}" in cells
    assert new not in audit_page.content.decode()


def test_the_admin_rotation_of_an_unknown_endpoint_is_a_404(ddb, client):
    """No such endpoint: 404 on the confirmation and on the POST; nothing audited."""
    admin = superuser_client(client)
    assert admin.get("/admin/tenancy/webhookendpoint/999/rotate/").status_code == 404
    assert admin.post("/admin/tenancy/webhookendpoint/999/rotate/").status_code == 404
    assert rotations(ddb) == []


def test_a_rotation_the_audit_trail_refused_changes_nothing(ddb, client, monkeypatch):
    """The audit append fails: the command says nothing was changed, the admin answers
    503 saying so; the endpoint keeps its secret and no previous one, no secret shown."""
    endpoint = register()
    old = endpoint.secret

    def refused(*args, **kwargs):
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "Put")

    monkeypatch.setattr(tenant_changes, "tenant_event", refused)
    with pytest.raises(CommandError, match="nothing was changed"):
        rotate(f"E{endpoint.pk}")
    answer = superuser_client(client).post(f"/admin/tenancy/webhookendpoint/{endpoint.pk}/rotate/")
    assert answer.status_code == 503 and b"nothing was changed" in answer.content
    endpoint.refresh_from_db()
    assert (endpoint.secret, endpoint.previous_secret) == (old, "")
    assert SECRET_PREFIX not in answer.content.decode()
