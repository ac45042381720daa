"""An ACK_UNDELIVERED case on the staff pages: its queue (``/queues/undelivered/``), the
overview row, the case page in words (the endpoint, event, webhook-id, attempts and last
answer; no claim or cancellation panels), the suggested next step, and Redeliver and
Close without delivery through the form."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from reconciliation import clock
from reconciliation.acks import schedule
from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult, DeliveryStatus, Endpoint, secret_new
from reconciliation.acks.repository import AckRepository
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, CaseType
from tests.conftest import pledge_body
from tests.dashboard.test_labels import CODE_RE, MICROSECONDS, signed_in, visible_text
from tests.helpers import AS_SYSTEM

pytestmark = pytest.mark.django_db


@pytest.fixture
def ack_case(ddb, api, monkeypatch) -> str:
    """A pledge whose receiver answered 500 twice (the schedule cut to two attempts)."""
    monkeypatch.setattr(schedule, "RETRY_DELAYS_S", (30,))
    monkeypatch.setattr(schedule, "MAX_ATTEMPTS", 2)
    assert api.post("pg-1", pledge_body()).status_code == 201
    endpoint = Endpoint("E7", "acme", "https://crm.example.org/hooks", secret_new())

    def dispatch() -> None:
        acks_dispatch_once(
            AS_SYSTEM.store,
            endpoints_for=lambda tenant: [endpoint],
            resolve=lambda host, port: ["93.184.216.34"],
            sender=lambda *a, **k: AttemptResult(500),
        )

    dispatch()
    with clock.travel(60):
        dispatch()
    repository = CaseRepository(AS_SYSTEM.store)
    [case_id] = repository.ids_for_intent("acme#pg-1")
    return case_id


@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
def test_the_case_its_queue_and_the_overview_speak_words(ack_case, role):
    client: Client = signed_in(role)
    page = client.get(f"/cases/{ack_case}/")
    assert page.status_code == 200
    html = page.content.decode()
    text = visible_text(html)
    for shown in (
        "Undelivered acknowledgement",
        "Acknowledgement undelivered",
        "https://crm.example.org/hooks",
        "pledge.recorded",
        "HTTP 500",
        "Attempts",
    ):
        assert shown in text, shown
    assert "Decoded cancellation reasons" not in text and "Client was told" not in text
    assert not CODE_RE.findall(text) and not MICROSECONDS.findall(text)
    offered = 'value="REDELIVER"' in html and 'value="ACK_CLOSED"' in html
    assert offered == (role != "auditor")
    if role != "auditor":
        assert "then Redeliver" in text  # the suggested next step
    queue = client.get("/queues/undelivered/")
    assert queue.status_code == 200 and ack_case in queue.content.decode()
    assert "Undelivered acknowledgements" in visible_text(queue.content.decode())
    assert not CODE_RE.findall(visible_text(queue.content.decode()))
    overview = client.get("/")
    assert overview.status_code == 200
    assert "Undelivered acknowledgements" in visible_text(overview.content.decode())
    worklist = client.get("/worklist/", {"case_type": CaseType.ACK_UNDELIVERED})
    assert worklist.status_code == 200 and ack_case in worklist.content.decode()


def _dispose(client: Client, case_id: str, disposition: str, reason: str, version=None):
    case = CaseRepository(AS_SYSTEM.store).get(case_id)
    assert case is not None
    return client.post(
        f"/cases/{case_id}/dispose/",
        {
            "disposition": disposition,
            "seen_version": case.version if version is None else version,
            "action_id": str(uuid.uuid4()),
            "reason_code": "TRANSIENT_FAILURE",
            "reason_text": reason,
        },
    )


def test_redeliver_and_close_through_the_form(ack_case):
    client = signed_in("finance_staff")
    assert _dispose(client, ack_case, "REDELIVER", "").status_code == 400  # a reason
    stale = _dispose(client, ack_case, "REDELIVER", "Receiver fixed today.", version=0)
    assert stale.status_code == 409
    done = _dispose(client, ack_case, "REDELIVER", "Receiver fixed today.")
    assert done.status_code == 302
    state = AckRepository(AS_SYSTEM.store).get("acme#pg-1")
    assert state is not None and state.due
    assert state.deliveries["E7/pledge.recorded"].status == DeliveryStatus.PENDING
    case = CaseRepository(AS_SYSTEM.store).get(ack_case)
    assert case is not None and case.state == CaseState.OPEN
    closed = _dispose(client, ack_case, "ACK_CLOSED", "Tenant confirmed it got it by mail.")
    assert closed.status_code == 302
    case = CaseRepository(AS_SYSTEM.store).get(ack_case)
    assert case is not None and case.state == CaseState.RESOLVED
