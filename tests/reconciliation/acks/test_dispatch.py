"""Acknowledgements end to end: a pledge taken by the intake API, ``dispatch_acks --once``,
and a real ``webhook_sink`` process on loopback that verifies and deduplicates."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from reconciliation import clock
from reconciliation.acks.models import DeliveryStatus, event_id
from reconciliation.acks.repository import AckRepository
from tests import fault_helpers
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM, pledges

pytestmark = pytest.mark.django_db


def dispatch_once() -> str:
    out = io.StringIO()
    call_command("dispatch_acks", "--once", stdout=out)
    return out.getvalue()


def due(ddb) -> list[str]:
    repository = AckRepository(AS_SYSTEM.store)
    return [i for s in repository.shards() for i in repository.due(s, now=clock.epoch() + 10**6)]


def test_a_recorded_pledge_is_acknowledged_once_signed(ddb, api, acme_sink):
    """A pledge recorded through the API is due in ``acks_due`` from its own commit;
    one dispatch delivers it, signed, to the sink, which processes it exactly once; the
    delivery is recorded and the pledge leaves the index; a second dispatch sends nothing."""
    sink = acme_sink()
    assert api.post("k-1", pledge_body()).status_code == 201
    assert due(ddb) == ["acme#k-1"]

    assert "1 delivered" in dispatch_once()

    message = event_id("acme#k-1", "pledge.recorded")
    stats = sink.stats()
    assert (stats["rejected"], stats["duplicates"]) == (0, 0)
    assert stats["processed"] == [message]
    event = stats["events"][message]
    assert event["type"] == "pledge.recorded" and event["version"] == 1
    assert event["data"] == {
        "intent_id": "k-1",
        "tenant": "acme",
        "fund": "GENERAL",
        "amount": "25.00",
        "currency": "USD",
        "donor_ref": "D-1001",
        "recorded_at": pledges(ddb)[0]["created_at"],
        "case_id": None,
    }
    assert due(ddb) == []
    state = AckRepository(AS_SYSTEM.store).get("acme#k-1")
    assert state is not None
    [delivery] = state.deliveries.values()
    assert (delivery.status, delivery.attempts, delivery.last_code) == (
        DeliveryStatus.DELIVERED,
        1,
        200,
    )
    assert "0 delivered" in dispatch_once()
    assert sink.stats()["deliveries"] == 1


def test_a_lost_answer_is_retried_with_the_same_webhook_id(ddb, api, acme_sink, settings):
    """The sink processes the first delivery and never answers in time: the attempt is
    recorded as failed with a retry after backoff; when it is due, the retry carries the
    same ``webhook-id``: delivered twice, processed once."""
    settings.ACK_READ_TIMEOUT_S = 1
    sink = acme_sink("--misbehave", "timeout", "--misbehave-count", "1", "--delay", "3")
    assert api.post("k-2", pledge_body()).status_code == 201

    assert "1 failed" in dispatch_once()
    state = AckRepository(AS_SYSTEM.store).get("acme#k-2")
    assert state is not None
    [delivery] = state.deliveries.values()
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert delivery.last_code is None and "timeout" in delivery.last_error
    # Not due before its backoff (30 s, jittered by at most 20 %).
    assert delivery.next_at - clock.epoch() >= 23
    assert "0 delivered" in dispatch_once()

    with clock.travel(40):
        assert "1 delivered" in dispatch_once()
    message = event_id("acme#k-2", "pledge.recorded")
    stats = sink.stats()
    assert stats["ids_seen"] == [message, message]
    assert stats["processed"] == [message]
    assert (stats["deliveries"], stats["duplicates"]) == (2, 1)
    assert due(ddb) == []


def test_a_commit_that_did_not_apply_sends_no_event(ddb, api, acme_sink):
    """A commit whose transaction never applied (its answer unknown: 202) records no
    pledge, so nothing is due and the sink hears nothing."""
    sink = acme_sink()
    with fault_helpers.injected({"ambiguous_no_commit": 1.0}):
        assert api.post("k-3", pledge_body()).status_code == 202
    assert pledges(ddb) == [] and due(ddb) == []
    assert "0 delivered" in dispatch_once()
    assert sink.stats()["deliveries"] == 0


def test_a_dispatcher_down_for_days_loses_nothing(ddb, api, acme_sink):
    """A pledge recorded three days ago, and no dispatcher since (longer than a stream
    keeps its records, 24 h): the due fact is on the pledge itself, so it still waits in
    ``acks_due`` and the first pass now sends it, once. No sweep is needed to find it
    (docs/webhooks.md). The commit is the one moved in time: the sink checks the
    signature's timestamp against its own clock."""
    sink = acme_sink()
    with clock.travel(-(3 * 86400 + 3600)):
        assert api.post("k-4", pledge_body()).status_code == 201
    assert due(ddb) == ["acme#k-4"]
    assert "1 delivered" in dispatch_once()
    assert "0 delivered" in dispatch_once()
    assert sink.stats()["processed"] == [event_id("acme#k-4", "pledge.recorded")]
    assert due(ddb) == []
