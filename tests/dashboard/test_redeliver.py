"""Redelivery from the pledge page: finance staff or a supervisor sends one delivery
again, with a reason; the change is one conditional write on the pledge item
(conditioned on what the page read) with its audit event in the pledge's stream, in one
transaction; a stale page changes nothing; auditors cannot."""

from __future__ import annotations

import uuid

import pytest

from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult, Endpoint, event_id, secret_new
from reconciliation.acks.repository import AckRepository, LeaseLost
from reconciliation.audit.repository import AuditRepository
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.stores import pledge_stream
from tests.helpers import AS_SYSTEM, sign_in
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

ENDPOINT = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
KEY = "E1/pledge.recorded"


def dispatch(sent: list[str]) -> None:
    def answer(target, *, headers, body, **kwargs) -> AttemptResult:
        sent.append(headers["webhook-id"])
        return AttemptResult(200)

    acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [ENDPOINT],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=answer,
    )


def form(intent_id: str, **overrides) -> dict:
    state = AckRepository(AS_SYSTEM.store).get(intent_id)
    pledge = PledgeRepository(AS_SYSTEM.store).get(intent_id)
    assert state is not None and pledge is not None
    delivery = state.deliveries[KEY]
    data = {
        "tenant": "acme",
        "key": intent_id.split("#", 1)[1],
        "delivery": KEY,
        "seen_attempts": delivery.attempts,
        "seen_status": str(delivery.status),
        "seen_audit_seq": pledge.audit_seq,
        "action_id": str(uuid.uuid4()),
        "reason_code": "NEEDS_REVIEW",
        "reason_text": "The CRM lost the receipt; send it again.",
    }
    data.update(overrides)
    return data


def pledge_events(intent_id: str) -> list[dict]:
    return AuditRepository(AS_SYSTEM.store).stream_events(pledge_stream(intent_id))


def test_staff_send_a_delivered_event_again_audited_with_the_same_id(ddb, staff_client):
    """Delivered once; a member of staff sends it again: due now (back in ``acks_due``),
    one audit event with the reason; the next pass sends it, with the same webhook-id."""
    submit("rd-1")
    sent: list[str] = []
    dispatch(sent)
    assert AckRepository(AS_SYSTEM.store).get("acme#rd-1").due is False  # type: ignore[union-attr]
    page = staff_client.get("/pledges/acme/rd-1/").content.decode()
    assert "Send again now" in page

    answer = staff_client.post("/acks/redeliver/", form("acme#rd-1"))

    assert answer.status_code == 302 and answer["Location"] == "/pledges/acme/rd-1/#deliveries"
    state = AckRepository(AS_SYSTEM.store).get("acme#rd-1")
    assert state is not None and state.due
    assert str(state.deliveries[KEY].status) == "PENDING"
    events = pledge_events("acme#rd-1")
    assert events[-1]["action"] == "ack_redelivered"
    assert events[-1]["reason_text"] == "The CRM lost the receipt; send it again."
    pledge = PledgeRepository(AS_SYSTEM.store).get("acme#rd-1")
    assert pledge is not None and pledge.audit_head == events[-1]["hash"]
    assert "The delivery is due now" in staff_client.get(answer["Location"]).content.decode()

    dispatch(sent)
    assert sent == [event_id("acme#rd-1", "pledge.recorded")] * 2
    settled = AckRepository(AS_SYSTEM.store).get("acme#rd-1")
    assert settled is not None and not settled.due
    assert settled.deliveries[KEY].attempts == 2


def test_a_stale_page_changes_nothing(ddb, supervisor_client):
    """The page read one attempt; the dispatcher made another since: refused, nothing
    written, no audit event, the page says why."""
    submit("rd-2")
    dispatch([])
    stale = form("acme#rd-2", seen_attempts=0)
    before = pledge_events("acme#rd-2")

    answer = supervisor_client.post("/acks/redeliver/", stale, follow=True)

    assert "Not sent again: The delivery changed since the page was read" in (
        answer.content.decode()
    )
    assert pledge_events("acme#rd-2") == before
    state = AckRepository(AS_SYSTEM.store).get("acme#rd-2")
    assert state is not None and not state.due


def test_auditors_cannot_and_a_bad_form_is_a_400(ddb, client):
    submit("rd-3")
    dispatch([])
    sign_in(client, "auditor")
    assert "Send again now" not in client.get("/pledges/acme/rd-3/").content.decode()
    assert client.post("/acks/redeliver/", form("acme#rd-3")).status_code == 403
    sign_in(client, "finance_staff")
    bad = client.post("/acks/redeliver/", form("acme#rd-3", reason_text="short"))
    assert bad.status_code == 400 and b"Not sent again" in bad.content
    assert pledge_events("acme#rd-3")[-1]["action"] == "pledge_recorded"


def test_a_dispatcher_that_read_before_the_redelivery_cannot_record_on_that_read(
    ddb, supervisor_client
):
    """The redelivery moves the pledge's fence on: a dispatcher holding a read from before
    it (one may be sending right now: no per-pledge lease stops a redelivery) has its
    record refused instead of settling over the change; the next pass sends it."""
    submit("rd-4")
    repository = AckRepository(AS_SYSTEM.store)
    dispatch([])
    before = repository.get("acme#rd-4")
    assert before is not None and not before.due
    supervisor_client.post("/acks/redeliver/", form("acme#rd-4"))
    with pytest.raises(LeaseLost):
        repository.record(
            "acme#rd-4",
            fence=before.fence,
            status="RECORDED",
            deliveries=before.deliveries,
            next_due=None,
        )
    after = repository.get("acme#rd-4")
    assert after is not None and after.due and after.fence == before.fence + 1
    assert str(after.deliveries[KEY].status) == "PENDING"
    sent: list[str] = []
    dispatch(sent)
    assert sent == [event_id("acme#rd-4", "pledge.recorded")]
