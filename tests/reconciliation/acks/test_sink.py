"""The development sink's rules, without a process: a bad signature is refused and not
processed; a repeated ``webhook-id`` is a duplicate, processed once."""

from __future__ import annotations

from reconciliation import clock
from reconciliation.acks.models import secret_new
from reconciliation.acks.send import signed_headers
from reconciliation.acks.sink import Misbehaviour, SinkState


def test_the_sink_verifies_and_deduplicates():
    """Signed by another secret: 400, nothing processed. Twice the same id: one processed,
    one duplicate, both answered 200."""
    secret = secret_new()
    sink = SinkState(secret=secret)
    body = b'{"type":"pledge.recorded"}'
    forged = signed_headers(secret=secret_new(), event_id="msg_1", at=clock.now(), body=body)
    assert sink.receive(body, forged) == (400, Misbehaviour.NONE)
    good = signed_headers(secret=secret, event_id="msg_1", at=clock.now(), body=body)
    assert sink.receive(body, good) == (200, Misbehaviour.NONE)
    assert sink.receive(body, good) == (200, Misbehaviour.NONE)
    stats = sink.stats()
    assert (stats["rejected"], stats["deliveries"], stats["duplicates"]) == (1, 2, 1)
    assert stats["processed"] == ["msg_1"]


def test_misbehaviour_applies_to_the_first_deliveries_only():
    """``--misbehave-count 1``: the first delivery is told to misbehave, the next is not."""
    secret = secret_new()
    sink = SinkState(secret=secret, misbehave=Misbehaviour.ERROR_500, misbehave_count=1)
    body = b"{}"
    first = signed_headers(secret=secret, event_id="msg_a", at=clock.now(), body=body)
    second = signed_headers(secret=secret, event_id="msg_b", at=clock.now(), body=body)
    assert sink.receive(body, first)[1] == Misbehaviour.ERROR_500
    assert sink.receive(body, second)[1] == Misbehaviour.NONE
