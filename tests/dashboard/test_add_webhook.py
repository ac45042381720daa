"""``add_webhook --tenant T URL [--events …]``: registers an endpoint, prints its signing
secret once, audits it without the secret; refuses an internal or plain-http URL and
then writes nothing. The admin lists endpoints and never shows a secret."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from dashboard.tenancy.models import WebhookEndpoint
from reconciliation.acks.models import SECRET_PREFIX
from tests.helpers import audit_events, pass_second_factor, staff_user

pytestmark = pytest.mark.django_db


def add_webhook(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("add_webhook", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_a_loopback_endpoint_in_debug_is_registered_and_its_secret_printed_once(ddb, settings):
    """In debug or demo a loopback URL is accepted; the last line is the ``whsec_``
    secret the row holds; the audit event names the URL and the secret's last characters
    only."""
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    lines = add_webhook("--tenant", "acme", "http://127.0.0.1:9911/hooks")
    secret = lines[-1]
    assert secret.startswith(SECRET_PREFIX) and len(secret) > 30
    [endpoint] = WebhookEndpoint.objects.all()
    assert (endpoint.tenant.name, endpoint.url, endpoint.secret, endpoint.enabled) == (
        "acme",
        "http://127.0.0.1:9911/hooks",
        secret,
        True,
    )
    assert endpoint.event_list() == ("pledge.recorded", "pledge.voided")
    [event] = [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "webhook_added"]
    assert event["after"] == {
        "url": "http://127.0.0.1:9911/hooks",
        "events": ["pledge.recorded", "pledge.voided"],
        "secret": "…" + secret[-4:],
        "max_in_flight": 8,
        "rate_per_s": None,
    }
    assert secret not in str(audit_events(ddb))


def test_an_endpoint_is_registered_with_its_delivery_limits(ddb, settings):
    """``--max-in-flight`` and ``--rate`` are kept on the row, reach the dispatcher's
    endpoint and are named in the audit event."""
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    lines = add_webhook(
        "--tenant", "acme", "http://127.0.0.1:9912/hooks", "--max-in-flight", "3", "--rate", "2.5"
    )
    assert "at most 3 requests at once, 2.5/s" in lines[0]
    [endpoint] = WebhookEndpoint.objects.all()
    plain = endpoint.as_endpoint()
    assert (plain.max_in_flight, plain.rate_per_s) == (3, 2.5)
    [event] = [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "webhook_added"]
    assert (event["after"]["max_in_flight"], event["after"]["rate_per_s"]) == (3, "2.5")


@pytest.mark.parametrize(
    "limits",
    [("--max-in-flight", "0"), ("--max-in-flight", "65"), ("--rate", "0"), ("--rate", "-1")],
)
def test_delivery_limits_out_of_bounds_register_nothing(ddb, settings, limits):
    """A limit out of bounds is refused with its reason; nothing is registered."""
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    with pytest.raises(CommandError, match=limits[0]):
        add_webhook("--tenant", "acme", "http://127.0.0.1:9913/hooks", *limits)
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:9911/hooks", "loopback"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("https://10.0.0.8/hooks", "private"),
        ("https://[fe80::1]/hooks", "link-local"),
        ("https://100.64.0.9/hooks", "not a globally routable address"),
        ("https://[2002:a9fe:a9fe::1]/hooks", "carries 169.254.169.254"),
        ("https://[fec0::1]/hooks", "site-local"),
        ("ftp://example.org/", "https"),
    ],
)
def test_a_refused_url_writes_nothing(ddb, settings, url, why):
    """Outside debug, loopback is refused like every internal address (literal addresses:
    nothing is resolved or connected to); nothing is registered or audited."""
    settings.WEBHOOK_ALLOW_LOOPBACK = False
    with pytest.raises(CommandError, match=why):
        add_webhook("--tenant", "acme", url)
    assert not WebhookEndpoint.objects.exists()
    assert audit_events(ddb, "TENANT#") == []


def test_the_admin_lists_endpoints_without_their_secret(ddb, client, settings):
    """The admin's endpoint list shows the URL and the secret's last characters; the
    secret itself appears nowhere, and nothing may be added or changed there."""
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    secret = add_webhook("--tenant", "acme", "http://127.0.0.1:9912/hooks")[-1]
    user = staff_user("root", "supervisor")
    user.is_superuser = user.is_staff = True
    user.save()
    client.force_login(user)
    pass_second_factor(client, user)

    listing = client.get("/admin/tenancy/webhookendpoint/")
    endpoint = WebhookEndpoint.objects.get()
    detail = client.get(f"/admin/tenancy/webhookendpoint/{endpoint.pk}/change/")

    assert listing.status_code == 200 and detail.status_code == 200
    for page in (listing, detail):
        text = page.content.decode()
        assert "http://127.0.0.1:9912/hooks" in text and secret[-4:] in text
        assert secret not in text
    assert client.get("/admin/tenancy/webhookendpoint/add/").status_code == 403
