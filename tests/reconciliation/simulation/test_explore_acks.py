"""The acknowledgement dispatcher as a hand of ``explore_faults --actors 2``: a few
targeted schedules (two dispatchers, a commit, a void, the receiver's faults) find no
violation, and defects brought back by mutation are caught by invariants g and i
(reconciliation/simulation/ack_invariants.py). The wide run is in tests/reliability/."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest

from reconciliation.acks import dispatch
from reconciliation.acks.models import AttemptResult
from reconciliation.acks.repository import AckRepository
from reconciliation.simulation.explorer.catalogue import ActorSpec, catalogue, pairs
from reconciliation.simulation.explorer.hands import HandsSession

pytestmark = [pytest.mark.dynamodb_local_only, pytest.mark.timeout(300)]


def _pair(a: str, b: str) -> tuple[ActorSpec, ActorSpec]:
    specs = {spec.name: spec for spec in catalogue()}
    return specs[a], specs[b]


@pytest.fixture(scope="module")
def session(dynamodb_local) -> Iterator[HandsSession]:
    prefix = f"xa{uuid.uuid4().hex[:8]}-"
    with HandsSession(endpoint_url=dynamodb_local.endpoint_url, prefix=prefix) as opened:
        yield opened


def test_the_dispatchers_and_the_void_meet_every_hand():
    """dispatch meets every hand of the catalogue; dispatch2 (a recorded pledge) and
    approve-void (a VOID_PLEDGE pending on the recorded pledge's case) meet every hand
    whose prelude agrees with theirs."""
    found = {frozenset((a.name, b.name)) for a, b in pairs(catalogue())}
    others = [spec.name for spec in catalogue() if spec.name != "dispatch"]
    assert all(frozenset(("dispatch", name)) in found for name in others)
    for pair in (("dispatch2", "approve-void"), ("dispatch2", "sweep"), ("approve-void", "late")):
        assert frozenset(pair) in found
    # One pending request per case; a recorded pledge leaves no stuck claim to retry.
    assert frozenset(("approve-void", "approve")) not in found
    assert frozenset(("dispatch2", "retry")) not in found


def _preempt_before(
    session: HandsSession, pair: tuple[str, str], label: str, *, writes: bool = False, then: int = 0
) -> tuple[str, ...]:
    """The prefix that runs ``pair[0]`` first and pre-empts it just before its first call
    labelled ``label`` (or, with ``writes``, its first write), or ``then`` calls later,
    letting ``pair[1]`` run."""
    first, other = pair
    serial = session.run(_pair(*pair), (first,))
    assert not serial.problems, serial.problems
    mine = [c for c in serial.calls if c.hand == first and not c.label.endswith(" other")]
    at = next(i for i, c in enumerate(mine) if (c.write if writes else c.label == label))
    return (first,) * (at + then + 1) + (other,)


@pytest.mark.parametrize("prefix", [("original",), ("dispatch",)])
def test_a_commit_beside_a_dispatcher_is_acknowledged_once(session, prefix):
    """The worker's commit before a dispatcher's pass, or after it (nothing due yet):
    either way the drain leaves pledge.recorded delivered once."""
    result = session.run(_pair("original", "dispatch"), prefix)
    assert not result.problems, result.problems


def test_two_dispatchers_one_lease(session):
    """dispatch read the due pledge; dispatch2 leases, sends and settles it before
    dispatch's lease: dispatch loses it and sends nothing (one receipt)."""
    prefix = _preempt_before(session, ("dispatch", "dispatch2"), "", writes=True)
    result = session.run(_pair("dispatch", "dispatch2"), prefix)
    assert result.preemptions == 1
    sends = [c.hand for c in result.calls if c.label == "send"]
    assert sends == ["dispatch2"], sends
    assert not result.problems, result.problems


@pytest.mark.parametrize(
    "prefix", [(), ("dispatch-shared",), ("dispatch2", "dispatch-shared", "dispatch2")]
)
def test_a_dispatcher_keeping_to_its_share_beside_another_sends_once(session, prefix):
    """A dispatcher that beats in the roster and keeps to its fair share, beside one that
    does not (dispatch2), in either order and pre-empted between dispatch2's calls: the
    event is processed once, nothing lost; the roster's calls are points of the schedule."""
    result = session.run(_pair("dispatch2", "dispatch-shared"), prefix)
    labels = [c.label for c in result.calls if c.hand == "dispatch-shared"]
    assert any("cases" in label for label in labels), labels
    assert not result.problems, result.problems


@pytest.mark.parametrize(
    "fault",
    [
        ("dispatch send#1", "refused"),
        ("dispatch send#1", "http500_after_processing"),
        ("dispatch send#1", "timeout_after_processing"),
        ("dispatch update cases#1", "crash_after"),  # died holding the shard's lease
        ("dispatch update pledges#1", "timeout_after"),  # recorded, the answer lost
    ],
)
def test_a_receiver_or_dynamodb_fault_under_a_dispatcher_loses_nothing(session, fault):
    """One fault at the first dispatcher's send or its writes; the second dispatcher
    then the drain at rest deliver: each event processed once, under its own id."""
    result = session.run(_pair("dispatch", "dispatch2"), (), fault)
    assert [c.fault for c in result.calls if c.fault] == [fault[1]]
    assert not result.problems, result.problems


def _record_point(session: HandsSession) -> tuple[str, ...]:
    """The prefix that pre-empts dispatch2 just after its send, before its record,
    letting approve-void approve the void in between."""
    return _preempt_before(session, ("dispatch2", "approve-void"), "send", then=1)


def test_a_void_between_the_send_and_the_record_is_sent(session):
    """The void lands while dispatch2 sends pledge.recorded: its record is refused, and
    the drain sends pledge.recorded again (same id) and pledge.voided."""
    result = session.run(_pair("approve-void", "dispatch2"), _record_point(session))
    assert result.preemptions == 1
    assert not result.problems, result.problems


def test_a_record_that_does_not_check_the_pledge_is_caught(session, monkeypatch):
    """Mutation: the dispatcher's record holds whatever status the pledge has now (last
    writer wins), so settling erases the due fact of a void that landed during the send:
    pledge.voided is never sent (invariant g)."""
    real = AckRepository.record

    def last_writer_wins(self, intent_id, *, status, **kwargs):
        current = self.get(intent_id)
        return real(self, intent_id, status=current.pledge.status if current else status, **kwargs)

    prefix = _record_point(session)
    monkeypatch.setattr(AckRepository, "record", last_writer_wins)
    result = session.run(_pair("approve-void", "dispatch2"), prefix)
    found = [str(p) for p in result.problems]
    assert any("pledge.voided missing and the pledge is not in acks_due" in p for p in found), found


def test_a_webhook_id_per_attempt_is_caught(session, monkeypatch):
    """Mutation: each attempt carries a fresh webhook-id, so the receiver cannot tell a
    retry from a new event: after a timeout past processing it processes it twice
    (invariant i)."""
    counter = itertools.count()
    real = dispatch.event_id
    monkeypatch.setattr(dispatch, "event_id", lambda i, e: f"{real(i, e)}-{next(counter)}")
    fault = ("dispatch send#1", "timeout_after_processing")
    result = session.run(_pair("dispatch", "dispatch2"), (), fault)
    found = [str(p) for p in result.problems]
    assert any("i each event processed once" in p and "2 webhook-ids" in p for p in found), found


def test_a_refusal_taken_for_a_delivery_is_caught(session, monkeypatch):
    """Mutation: any answer counts as success, so a refused connection is recorded
    DELIVERED though the receiver never processed the event (invariant i)."""
    monkeypatch.setattr(AttemptResult, "ok", property(lambda self: True))
    result = session.run(_pair("dispatch", "dispatch2"), (), ("dispatch send#1", "refused"))
    found = [str(p) for p in result.problems]
    assert any("recorded DELIVERED, never processed (lost)" in p for p in found), found
