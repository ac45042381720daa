"""The pledge page's deliveries (acknowledgements you can see): per endpoint
and event type its status in words, attempts, last answer, last and next attempt, the
``webhook-id`` and the last attempt's ``webhook-signature`` header (never the secret)."""

from __future__ import annotations

import re

import pytest

from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult, Endpoint, event_id, secret_new
from reconciliation.acks.repository import AckRepository
from tests.helpers import AS_SYSTEM
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

FAILING = Endpoint("E1", "acme", "https://down.example.org/hooks", secret_new())
WORKING = Endpoint("E2", "acme", "https://crm.example.org/hooks", secret_new())


def answer(target, *, headers, body, **kwargs) -> AttemptResult:
    return AttemptResult(503 if target.host == "down.example.org" else 200)


def dispatch() -> None:
    acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [FAILING, WORKING],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=answer,
    )


def test_each_delivery_shows_its_status_answer_next_attempt_id_and_signature(ddb, auditor_client):
    """One endpoint answered 503 (waiting, a next attempt), one 200 (delivered, none):
    both with the labels, the answer, the id the receiver deduplicates on, and the
    signature header of the last attempt, as stored with the attempt."""
    submit("dl-1")
    dispatch()
    stored = AckRepository(AS_SYSTEM.store).get("acme#dl-1")
    assert stored is not None
    signatures = {d.endpoint_id: d.last_signature for d in stored.deliveries.values()}
    assert all(s.startswith("v1,") for s in signatures.values()), signatures

    html = auditor_client.get("/pledges/acme/dl-1/").content.decode()
    section = html.split('id="deliveries"', 1)[1].split("</section>", 1)[0]
    assert section.count('class="delivery"') == 2
    failing, working = section.split('class="delivery"')[1:]
    assert "down.example.org" in failing and "Waiting" in failing and "HTTP 503" in failing
    assert re.search(r"<dt>Next attempt</dt><dd><time", failing)
    assert "crm.example.org" in working and "Delivered" in working and "HTTP 200" in working
    assert '<dt>Next attempt</dt><dd><span class="muted">none</span>' in working
    for part, endpoint in ((failing, "E1"), (working, "E2")):
        assert "Pledge recorded" in part and "<dd>1</dd>" in part  # one attempt each
        assert f"<code>{event_id('acme#dl-1', 'pledge.recorded')}</code>" in part
        assert f'<code class="wrap">{signatures[endpoint]}</code>' in part
    for endpoint in (FAILING, WORKING):
        assert endpoint.secret not in html
    assert "PENDING" not in html and "DELIVERED" not in html


def test_a_pledge_not_yet_dispatched_says_its_acknowledgement_is_due(ddb, staff_client):
    """Recorded, no dispatcher pass yet: due, no attempt (never invented rows)."""
    submit("dl-2")
    html = staff_client.get("/pledges/acme/dl-2/").content.decode()
    assert "no attempt made yet" in html and 'class="delivery"' not in html
