"""The delivery attempt log: the dispatcher's edge writes one row per POST (time, event,
pledge, status or error, duration); a database that refuses the row costs no delivery;
rows past the retention are pruned daily."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from dashboard.tenancy.delivery_log import delivery_attempts_prune
from dashboard.tenancy.management.commands.dispatch_acks import attempts_recorded
from dashboard.tenancy.models import DeliveryAttempt
from dashboard.tenancy.tasks import delivery_attempts_prune_task
from dashboard.tenancy.tenant_changes import webhook_register
from reconciliation.acks.models import AttemptResult, DeliveryStatus, event_id
from reconciliation.acks.repository import AckRepository
from reconciliation.actors import command_actor
from tests.dashboard.dispatch import dispatch_acks
from tests.helpers import AS_SYSTEM
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]


def answer(target, *, headers, body, **kwargs) -> AttemptResult:
    if target.host == "down.example.org":
        return AttemptResult(None, "connect: refused", duration_ms=3.5)
    return AttemptResult(204, duration_ms=12.0)


def dispatch() -> None:
    dispatch_acks(answer, on_attempts=attempts_recorded)


def test_each_attempt_is_one_row_with_its_answer_and_duration(ddb):
    """One pledge to two endpoints: a row each, with the event, the pledge, the
    ``webhook-id``, the status or the error and the duration; the counters still count."""
    actor = command_actor("test")
    down = webhook_register(
        "acme", "https://down.example.org/h", events=("pledge.recorded",), actor=actor
    )
    up = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=actor
    )
    submit("log-1")

    dispatch()

    failed = DeliveryAttempt.objects.get(endpoint=down)
    ok = DeliveryAttempt.objects.get(endpoint=up)
    assert (failed.tenant, failed.intent_id, failed.event_type) == (
        "acme",
        "acme#log-1",
        "pledge.recorded",
    )
    assert failed.webhook_id == event_id("acme#log-1", "pledge.recorded") == ok.webhook_id
    assert (failed.code, failed.error, failed.duration_ms, failed.ok) == (
        None,
        "connect: refused",
        3.5,
        False,
    )
    assert (ok.code, ok.error, ok.duration_ms, ok.ok) == (204, "", 12.0, True)
    assert timezone.is_aware(failed.at) and abs(timezone.now() - failed.at) < timedelta(minutes=1)
    down.refresh_from_db()
    assert (down.attempts, down.failures) == (1, 1)


def test_a_log_the_database_refuses_costs_no_delivery(ddb, monkeypatch):
    """Every insert into the log fails: the attempt is still recorded as delivered on the
    pledge item and the pledge leaves ``acks_due``; nothing is sent twice."""
    webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    submit("log-2")

    def refuse(*args, **kwargs):
        raise DatabaseError("disk full")

    monkeypatch.setattr(DeliveryAttempt.objects, "create", refuse)
    monkeypatch.setattr(DeliveryAttempt.objects, "bulk_create", refuse)
    dispatch()
    dispatch()

    state = AckRepository(AS_SYSTEM.store).get("acme#log-2")
    assert state is not None and not state.due
    (delivery,) = state.deliveries.values()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 1)
    assert DeliveryAttempt.objects.count() == 0


def test_rows_past_the_retention_are_pruned_and_the_rest_kept(ddb, settings):
    """Rows older than ``DELIVERY_ATTEMPT_RETENTION_DAYS`` go, in batches; newer stay; the
    daily task does the same and a second run finds nothing."""
    endpoint = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    now = timezone.now()
    for n, age in enumerate((40, 31, 29, 1)):
        DeliveryAttempt.objects.create(
            endpoint=endpoint,
            tenant="acme",
            intent_id=f"acme#p-{n}",
            event_type="pledge.recorded",
            webhook_id="msg_x",
            at=now - timedelta(days=age),
            code=500,
            ok=False,
        )

    assert delivery_attempts_prune(now=now, days=30) == 2
    assert sorted(DeliveryAttempt.objects.values_list("intent_id", flat=True)) == [
        "acme#p-2",
        "acme#p-3",
    ]
    settings.DELIVERY_ATTEMPT_RETENTION_DAYS = 7
    assert delivery_attempts_prune_task.apply().get() == 1
    assert delivery_attempts_prune_task.apply().get() == 0


def test_the_prune_is_scheduled_daily():
    entry = settings.CELERY_BEAT_SCHEDULE["delivery-attempts-prune"]
    assert entry["task"] == delivery_attempts_prune_task.name
    assert entry["schedule"].hour == {settings.DELIVERY_ATTEMPT_PRUNE_HOUR}


def test_a_page_cursor_keeps_the_exact_microsecond():
    """A cursor read back names the same instant and id, to the microsecond: the next
    page compares times for equality."""
    from datetime import UTC, datetime

    from dashboard.tenancy.delivery_log import Cursor

    for micro in (436490, 999999, 1, 0):
        at = datetime(2026, 12, 5, 13, 49, 47, micro, tzinfo=UTC)
        assert Cursor.parse(Cursor(at, 42).text()) == Cursor(at, 42)


def test_the_dispatch_acks_command_logs_its_attempts(ddb, monkeypatch):
    """``dispatch_acks --once`` (its own edge hook, not a test's) counts each attempt on
    the endpoint and logs it; the receiver and resolver are stand-ins (no network)."""
    from django.core.management import call_command

    from dashboard.tenancy.management.commands import dispatch_acks as command

    endpoint = webhook_register(
        "acme", "https://crm.example.org/h", events=("pledge.recorded",), actor=command_actor("t")
    )
    submit("log-cmd")
    real = command.Dispatcher

    def offline(store, **kwargs):
        return real(store, resolve=lambda host, port: ["93.184.216.34"], sender=answer, **kwargs)

    monkeypatch.setattr(command, "Dispatcher", offline)
    call_command("dispatch_acks", "--once")

    [row] = DeliveryAttempt.objects.filter(endpoint=endpoint)
    assert (row.intent_id, row.code, row.ok) == ("acme#log-cmd", 204, True)
    endpoint.refresh_from_db()
    assert (endpoint.attempts, endpoint.failures) == (1, 0)
