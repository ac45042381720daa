"""Resending an endpoint's failed deliveries after its outage: a supervisor previews the
deliveries that failed since a time and are still undelivered, confirms with a reason,
and sees the outcome of each; each resend is audited in its pledge's stream and keeps the
``webhook-id``. Finance staff and auditors cannot; a confirm replayed, or made on a stale
preview, resends nothing twice; bad input answers 400 and writes nothing."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.tenancy.management.commands.dispatch_acks import attempt_recorded
from dashboard.tenancy.models import WebhookEndpoint
from dashboard.tenancy.tenant_changes import webhook_register
from reconciliation import clock
from reconciliation.acks.models import AttemptResult, DeliveryStatus, event_id
from reconciliation.acks.redeliver import RedeliverAsk, RedeliverSeen, ack_redeliver
from reconciliation.acks.repository import AckRepository
from reconciliation.actors import command_actor
from reconciliation.audit.repository import AuditRepository
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.stores import pledge_stream
from tests.conftest import staff_actor
from tests.dashboard.dispatch import dispatch_acks
from tests.helpers import AS_SYSTEM, sign_in
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

REASON = {"reason_code": "NEEDS_REVIEW", "reason_text": "The CRM was down all morning; resend."}


class Receiver:
    """The endpoint's answers (its outage, then its recovery) and the ids it received."""

    def __init__(self) -> None:
        self.code = 503
        self.received: list[tuple[str, str]] = []

    def __call__(self, target, *, headers, body, **kwargs) -> AttemptResult:
        self.received.append((headers["webhook-id"], str(self.code)))
        return AttemptResult(self.code)


def dispatch(receiver: Receiver) -> None:
    dispatch_acks(receiver, on_attempt=attempt_recorded)


def delivery(intent_id: str, endpoint: WebhookEndpoint):
    state = AckRepository(AS_SYSTEM.store).get(intent_id)
    assert state is not None
    return state.deliveries[f"E{endpoint.pk}/pledge.recorded"]


def redelivered_events(intent_id: str) -> list[dict]:
    events = AuditRepository(AS_SYSTEM.store).stream_events(pledge_stream(intent_id))
    return [e for e in events if e["action"] == "ack_redelivered"]


@pytest.fixture
def outage(ddb):
    """An endpoint down for three pledges; the third is delivered since (resent by hand
    once the receiver was back), so two remain undelivered."""
    endpoint = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    receiver = Receiver()
    for key in ("rs-1", "rs-2", "rs-3"):
        submit(key)
    dispatch(receiver)
    seen = delivery("acme#rs-3", endpoint)
    pledge = PledgeRepository(AS_SYSTEM.store).get("acme#rs-3")
    assert pledge is not None
    ack_redeliver(
        AS_SYSTEM.store,
        intent_id="acme#rs-3",
        seen=RedeliverSeen(seen.key, seen.attempts, str(seen.status), pledge.audit_seq),
        ask=RedeliverAsk(staff_actor(), **REASON),
    )
    receiver.code = 204
    dispatch(receiver)
    assert delivery("acme#rs-3", endpoint).status == DeliveryStatus.DELIVERED
    return endpoint, receiver


def since(hours: float) -> str:
    return (timezone.now() - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")


def preview(client, endpoint: WebhookEndpoint, hours: float = 1):
    return client.post(f"/acks/{endpoint.pk}/resend/", {"step": "preview", "since": since(hours)})


def confirm_form(html: str) -> dict:
    """The confirm form's fields as the preview rendered them, with a reason."""
    form = html.split('class="resend-confirm"')[1].split("</form>")[0]
    hidden = dict(re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', form))
    hidden.pop("csrfmiddlewaretoken", None)
    return hidden | REASON


def test_a_supervisor_previews_confirms_and_each_resend_keeps_its_id(outage, supervisor_client):
    """The preview lists the two undelivered pledges (not the one delivered since) and
    says one was delivered since; the confirm makes both due now, one audited event each
    (with the reason and the bulk's id), the outcome of each shown; the next dispatch
    sends them with their same ``webhook-id``."""
    endpoint, receiver = outage
    page = supervisor_client.get(f"/acks/{endpoint.pk}/").content.decode()
    assert "Resend failed deliveries" in page

    shown = preview(supervisor_client, endpoint)
    html = shown.content.decode()

    assert shown.status_code == 200
    assert "2 deliveries to resend" in html and "1 more failed then but was delivered since" in html
    assert "/pledges/acme/rs-1/" in html and "/pledges/acme/rs-2/" in html
    assert "/pledges/acme/rs-3/" not in html
    assert redelivered_events("acme#rs-1") == []  # a preview writes nothing

    done = supervisor_client.post(f"/acks/{endpoint.pk}/resend/", confirm_form(html))

    result = done.content.decode()
    assert done.status_code == 200 and "2 of 2 resent" in result
    assert result.count('class="resend-resent"') == 2
    bulk_ids = set()
    for intent_id in ("acme#rs-1", "acme#rs-2"):
        state = AckRepository(AS_SYSTEM.store).get(intent_id)
        assert state is not None and state.due and (state.due_at or 0) <= clock.epoch()
        assert delivery(intent_id, endpoint).status == DeliveryStatus.PENDING
        [event] = redelivered_events(intent_id)
        assert event["actor"]["username"] == "supervisor"
        assert (event["reason_code"], event["reason_text"]) == (
            REASON["reason_code"],
            REASON["reason_text"],
        )
        bulk_ids.add(event["detail"]["bulk_id"])
    assert len(bulk_ids) == 1

    receiver.received.clear()
    dispatch(receiver)
    assert sorted(receiver.received) == sorted(
        (event_id(i, "pledge.recorded"), "204") for i in ("acme#rs-1", "acme#rs-2")
    )


def test_a_confirm_replayed_resends_nothing_twice(outage, supervisor_client):
    """The same confirm posted twice (a double click, a second supervisor's identical
    preview): the second finds each delivery moved on since its preview and leaves it;
    one audited event per pledge in all."""
    endpoint, _ = outage
    form = confirm_form(preview(supervisor_client, endpoint).content.decode())

    first = supervisor_client.post(f"/acks/{endpoint.pk}/resend/", form).content.decode()
    second = supervisor_client.post(f"/acks/{endpoint.pk}/resend/", form).content.decode()

    assert "2 of 2 resent" in first
    assert "0 of 2 resent" in second and second.count('class="resend-changed"') == 2
    assert [len(redelivered_events(i)) for i in ("acme#rs-1", "acme#rs-2")] == [1, 1]


def test_only_supervisors_resend(outage, client):
    """Finance staff and auditors read the Deliveries page without the resend form, and
    a resend they post is refused (403) and writes nothing."""
    endpoint, _ = outage
    sign_in(client, "supervisor", "boss")
    form = confirm_form(preview(client, endpoint).content.decode())
    for role in ("finance_staff", "auditor"):
        sign_in(client, role)
        assert (
            "Resend failed deliveries" not in client.get(f"/acks/{endpoint.pk}/").content.decode()
        )
        assert preview(client, endpoint).status_code == 403
        assert client.post(f"/acks/{endpoint.pk}/resend/", form).status_code == 403
    assert redelivered_events("acme#rs-1") == []


def test_bad_input_answers_400_and_writes_nothing(outage, supervisor_client):
    """No time, a tampered preview, another endpoint's preview, a missing reason: 400,
    a page that says why, nothing resent."""
    endpoint, _ = outage
    other = webhook_register(
        "acme", "https://other.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    url = f"/acks/{endpoint.pk}/resend/"
    form = confirm_form(preview(supervisor_client, endpoint).content.decode())

    assert supervisor_client.post(url, {"step": "preview", "since": "yesterday"}).status_code == 400
    tampered = supervisor_client.post(url, form | {"preview": form["preview"][:-2] + "xx"})
    assert tampered.status_code == 400 and "Not a preview of this page" in tampered.content.decode()
    elsewhere = supervisor_client.post(f"/acks/{other.pk}/resend/", form)
    assert (
        elsewhere.status_code == 400
        and "Not a preview of this endpoint" in elsewhere.content.decode()
    )
    assert supervisor_client.post(url, form | {"reason_text": ""}).status_code == 400
    assert supervisor_client.post("/acks/999999/resend/", form).status_code == 404
    assert [redelivered_events(i) for i in ("acme#rs-1", "acme#rs-2")] == [[], []]


def test_a_window_after_the_failures_previews_nothing(outage, supervisor_client):
    """Failures before the chosen time are not listed: nothing to resend."""
    endpoint, _ = outage
    ahead = (timezone.now() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    html = supervisor_client.post(
        f"/acks/{endpoint.pk}/resend/", {"step": "preview", "since": ahead}
    ).content.decode()
    assert "0 deliveries to resend" in html and "Nothing to resend" in html
