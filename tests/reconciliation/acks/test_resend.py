"""The bulk resend's service (reconciliation/acks/resend.py): the preview keeps the
deliveries still undelivered; the resend acts on what the preview read, each item its own
audited redelivery; two supervisors confirming at once resend each delivery once; only a
supervisor may, with a reason, and a refusal writes nothing."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from reconciliation.acks.dispatch import acks_dispatch_once
from reconciliation.acks.models import AttemptResult, DeliveryStatus, Endpoint, secret_new
from reconciliation.acks.redeliver import RedeliverRefused
from reconciliation.acks.repository import AckRepository
from reconciliation.acks.resend import (
    ResendOutcome,
    ResendResult,
    acks_resend,
    acks_resend_preview,
)
from reconciliation.audit.repository import AuditRepository
from reconciliation.stores import pledge_stream
from tests.conftest import staff_actor
from tests.helpers import AS_SYSTEM
from tests.reconciliation.factories import submit

pytestmark = pytest.mark.django_db

ENDPOINT = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())
KEYS = ("pr-1", "pr-2", "pr-3")
REASON = {"reason_code": "NEEDS_REVIEW", "reason_text": "The receiver was down; resend all."}


def failed_three() -> list[tuple[str, str]]:
    """Three pledges whose one delivery failed (the endpoint answered 503): candidates."""
    for key in KEYS:
        submit(key)
    acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=lambda tenant: [ENDPOINT],
        resolve=lambda host, port: ["93.184.216.34"],
        sender=lambda target, **kwargs: AttemptResult(503),
    )
    return [(f"acme#{k}", "pledge.recorded") for k in KEYS]


def redelivered(intent_id: str) -> list[dict]:
    events = AuditRepository(AS_SYSTEM.store).stream_events(pledge_stream(intent_id))
    return [e for e in events if e["action"] == "ack_redelivered"]


def resend(items, username: str = "sam", role: str = "supervisor") -> list[ResendResult]:
    return acks_resend(
        items,
        store_for=lambda intent_id: AS_SYSTEM.store,
        actor=staff_actor(username, role),
        bulk_id=f"bulk-{username}",
        **REASON,
    )


@pytest.mark.dynamodb_local_only  # a race: moto's in-process backend is not thread-safe
def test_two_supervisors_confirming_at_once_resend_each_delivery_once(ddb):
    """Two supervisors previewed the same three deliveries and confirm at one instant:
    each delivery is resent once between them (one audited event each), the other is
    told it changed since its preview."""
    candidates = failed_three()
    previews = [
        acks_resend_preview(candidates, endpoint_id="E1", store_for=lambda i: AS_SYSTEM.store)
        for _ in range(2)
    ]
    assert [len(p.items) for p in previews] == [3, 3]
    start = threading.Barrier(2)
    results: dict[str, list[ResendResult]] = {}

    def supervisor(name: str, items) -> None:
        start.wait()
        results[name] = resend(items, username=name)

    threads = [
        threading.Thread(target=supervisor, args=(name, p.items))
        for name, p in zip(("sam", "kim"), previews, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    for n, (intent_id, _) in enumerate(candidates):
        outcomes = sorted(str(results[name][n].outcome) for name in ("sam", "kim"))
        assert outcomes == ["CHANGED", "RESENT"], intent_id
        assert len(redelivered(intent_id)) == 1
        state = AckRepository(AS_SYSTEM.store).get(intent_id)
        assert state is not None and state.due


def test_the_preview_keeps_the_undelivered_and_the_resend_acts_on_what_it_read(ddb):
    """A delivery that succeeds after the preview is not resent (its attempts moved on);
    the others are, with their bulk id in the audit detail; a candidate the pledge has no
    delivery for is counted, not listed."""
    candidates = failed_three()
    preview = acks_resend_preview(
        [*candidates, ("acme#nope", "pledge.recorded")],
        endpoint_id="E1",
        store_for=lambda i: AS_SYSTEM.store,
    )
    assert [i.intent_id for i in preview.items] == [c[0] for c in candidates]
    assert (preview.delivered, preview.missing) == (0, 1)
    assert {str(i.delivery.status) for i in preview.items if i.delivery} == {"PENDING"}

    # pr-3 is delivered between the preview and the confirm (its retry came due).
    first = preview.items[2]
    repository = AckRepository(AS_SYSTEM.store)
    state = repository.get(first.intent_id)
    assert state is not None
    repository.record(
        first.intent_id,
        fence=state.fence,
        status=state.pledge.status,
        deliveries={
            k: replace(d, status=DeliveryStatus.DELIVERED, attempts=2)
            for k, d in state.deliveries.items()
        },
        next_due=None,
    )

    results = resend(preview.items)

    assert [r.outcome for r in results] == [
        ResendOutcome.RESENT,
        ResendOutcome.RESENT,
        ResendOutcome.CHANGED,
    ]
    assert redelivered("acme#pr-3") == []
    [event] = redelivered("acme#pr-1")
    assert event["detail"] == {
        "endpoint": "E1",
        "event_type": "pledge.recorded",
        "bulk_id": "bulk-sam",
    }


def test_only_a_supervisor_with_a_reason_resends(ddb):
    """Finance staff, an auditor, or a supervisor without a written reason: refused
    before anything is written."""
    preview = acks_resend_preview(
        failed_three(), endpoint_id="E1", store_for=lambda i: AS_SYSTEM.store
    )
    for role in ("finance_staff", "auditor"):
        with pytest.raises(RedeliverRefused, match="Only supervisors"):
            resend(preview.items, role=role)
    with pytest.raises(RedeliverRefused):
        acks_resend(
            preview.items,
            store_for=lambda i: AS_SYSTEM.store,
            actor=staff_actor("sam", "supervisor"),
            bulk_id="b",
            reason_code="NEEDS_REVIEW",
            reason_text="",
        )
    assert [redelivered(f"acme#{k}") for k in KEYS] == [[], [], []]
