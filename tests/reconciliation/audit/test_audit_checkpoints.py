"""Signed checkpoints every ``AUDIT_CHECKPOINT_PERIOD_S``: from the period of the first
event on, every finished period gets one, empty or not; deleting the newest ones (or all
of ``SYSTEM``) is reported as missing checkpoints, and deleting or consistently rewriting
a stream of a checkpointed period is named by its checkpoint.

The clock is moved to fixed points after the next hour boundary X, so every test sees
the same periods whatever the time of day: case A and a pledge in X, case B in X+1, and
verification at X+3h+1000 s, when X+2 has been over for longer than the grace."""

from __future__ import annotations

import io
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from reconciliation import clock
from reconciliation.audit.repository import event_hash
from reconciliation.cases.vocabulary import Disposition
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.dynamo.items import to_item
from tests.helpers import AS_SYSTEM, TablesSnapshot, acting, audit_events, delete_event
from tests.reconciliation.factories import stuck_case, submit

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("midday")]

HOUR = timedelta(hours=1)
STAFF = acting("ada")
WHY = dict(reason_code="EVIDENCE_CONFIRMS", reason_text="Checked the consistent reads.")


def write_checkpoints() -> list[str]:
    from reconciliation.audit.checkpoints import audit_checkpoint

    return audit_checkpoint(store=AS_SYSTEM.store)


def verify() -> list[str]:
    from reconciliation.audit.verify import audit_verify

    return audit_verify(store=AS_SYSTEM.store).problems


@contextmanager
def at(moment: datetime):
    with clock.travel((moment - clock.now()).total_seconds()):
        yield


def label(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%MZ")


def escalated_case(key: str):
    case = stuck_case(key)
    case = case_assign(**STAFF.on(case)).case
    return case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(case, **WHY)).case


# The history of each engine and hour X, built once and copied into each test's tables.
_HISTORY: dict[tuple[str, datetime], tuple[TablesSnapshot, Any, Any]] = {}


@pytest.fixture
def history(ddb):
    """Case A (3 events) and a pledge in period X, case B in X+1, each period
    checkpointed by the task 200 s after it ended; yields X and the two cases with the
    clock at X+3h+1000 s. (The task's first run, at X+200 s, finds no event: nothing to
    sign yet.)"""
    now = clock.now()  # today's noon (``midday``), so X is the same for every test today
    x = now.replace(minute=0, second=0, microsecond=0) + HOUR
    kept = _HISTORY.get((ddb.name, x))
    if kept is not None:
        snapshot, a, b = kept
        snapshot.restore(ddb)
        with at(x + 3 * HOUR + timedelta(seconds=1000)):
            yield x, a, b
        return
    a, b = _build_history(x)
    _HISTORY[(ddb.name, x)] = (TablesSnapshot.take(ddb), a, b)
    with at(x + 3 * HOUR + timedelta(seconds=1000)):
        yield x, a, b


def _build_history(x: datetime):
    with at(x + timedelta(seconds=200)):
        assert write_checkpoints() == []
    with at(x + timedelta(seconds=600)):
        a = escalated_case("ck-a")
        submit("ck-pledge")
    with at(x + HOUR + timedelta(seconds=200)):
        assert write_checkpoints() == [label(x)]
    with at(x + HOUR + timedelta(seconds=600)):
        b = stuck_case("ck-b")
    for n in (2, 3):
        with at(x + n * HOUR + timedelta(seconds=200)):
            assert write_checkpoints() == [label(x + (n - 1) * HOUR)]
    return a, b


def checkpoint_of(ddb, start: datetime) -> dict:
    [found] = [
        e
        for e in audit_events(ddb, "SYSTEM")
        if e["action"] == "audit_checkpoint" and e["detail"]["start"] == clock.iso(start)
    ]
    return found


def test_every_finished_period_gets_a_checkpoint_even_an_empty_one(ddb, history):
    """X lists case A's head (seq 3) and the pledge's, X+1 case B's, X+2 only the SYSTEM
    head (the previous checkpoint); the whole trail verifies without a warning."""
    from reconciliation.audit.verify import audit_verify

    x, a, b = history
    heads = {h[0]: h[1] for h in checkpoint_of(ddb, x)["detail"]["heads"]}
    assert heads[f"CASE#{a.case_id}"] == 3 and heads["PLEDGE#acme#ck-pledge"] == 1
    assert [h[0] for h in checkpoint_of(ddb, x + HOUR)["detail"]["heads"]] == [
        f"CASE#{b.case_id}",
        "SYSTEM",
    ]
    assert [h[0] for h in checkpoint_of(ddb, x + 2 * HOUR)["detail"]["heads"]] == ["SYSTEM"]
    report = audit_verify(store=AS_SYSTEM.store)
    assert (report.problems, report.warnings) == ([], [])
    assert write_checkpoints() == []


def test_the_first_checkpoint_is_the_first_events_period(ddb, history):
    """No checkpoint before the period of the first event (before: a fresh install's
    first run signed every period since yesterday's midnight, a day and a half of empty
    checkpoints, all reported as signed late)."""
    x, _, _ = history
    signed = [e for e in audit_events(ddb, "SYSTEM") if e["action"] == "audit_checkpoint"]
    assert [e["detail"]["start"] for e in signed] == [clock.iso(x + n * HOUR) for n in range(3)]


def test_a_deleted_and_re_signed_checkpoint_is_reported_as_signed_late(ddb, history):
    """Deleting the two newest checkpoints lets the task sign those periods again (as
    the table then is): that cannot pass for checkpoints signed on time; verification
    says they were signed late."""
    from reconciliation.audit.verify import audit_verify

    x, _, _ = history
    for event in audit_events(ddb, "SYSTEM")[-2:]:
        delete_event(ddb, "SYSTEM", event["seq"])
    assert write_checkpoints() == [label(x + HOUR), label(x + 2 * HOUR)]
    report = audit_verify(store=AS_SYSTEM.store)
    assert report.problems == []
    assert report.warnings[-1] == (
        f"checkpoints for 2 periods, {label(x + HOUR)} to {label(x + 2 * HOUR)}, signed up "
        "to 1 h 16 min after their periods ended: they vouch for the trail as it was then"
    )


def test_deleting_the_newest_checkpoint_is_reported_missing(ddb, history):
    """Deleting the newest checkpoint, the tail of SYSTEM: that period is named."""
    x, _, _ = history
    newest = audit_events(ddb, "SYSTEM")[-1]
    assert newest["detail"]["start"] == clock.iso(x + 2 * HOUR)
    delete_event(ddb, "SYSTEM", newest["seq"])
    assert verify() == [f"missing signed checkpoint for {label(x + 2 * HOUR)}"]


def test_deleting_the_newest_checkpoints_is_reported_as_one_run(ddb, history):
    """Deleting the two newest checkpoints (and nothing follows them): one line names
    both periods; the command exits 1."""
    x, _, _ = history
    for event in audit_events(ddb, "SYSTEM")[-2:]:
        delete_event(ddb, "SYSTEM", event["seq"])
    line = f"missing signed checkpoints for 2 periods of 3600 s, {label(x + HOUR)} to " + label(
        x + 2 * HOUR
    )
    assert verify() == [line]
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("verify_audit", stdout=out, stderr=io.StringIO())
    assert exit_.value.code == 1 and out.getvalue().splitlines() == [line]


def test_deleting_all_of_system_reports_every_period_with_events(ddb, history):
    """With every checkpoint gone there is no first checkpoint to count from; the
    periods that hold events still need one, and are named."""
    x, _, _ = history
    for event in audit_events(ddb, "SYSTEM"):
        delete_event(ddb, "SYSTEM", event["seq"])
    assert verify() == [
        f"missing signed checkpoints for 2 periods of 3600 s, {label(x)} to {label(x + HOUR)}"
    ]


def test_a_stream_deleted_with_its_item_after_its_checkpoint_is_named(ddb, history):
    """Case A's whole stream and its item deleted after X's checkpoint: no chain, no
    stored head left, but the checkpoint names the missing head."""
    x, a, _ = history
    stream = f"CASE#{a.case_id}"
    events = audit_events(ddb, stream)
    for event in events:
        delete_event(ddb, stream, event["seq"])
    ddb.client.delete_item(TableName=ddb.tables.cases, Key={"case_id": {"S": a.case_id}})
    checkpoint = checkpoint_of(ddb, x)
    assert verify() == [
        f"checkpoint {label(x)} (SYSTEM seq {checkpoint['seq']}): stream {stream} seq 3 "
        f"missing: expected hash {events[-1]['hash']}"
    ]


def test_a_stream_rewritten_consistently_after_its_checkpoint_is_named(ddb, history):
    """Case A's reason rewritten at seq 2, seq 2 and 3 re-hashed and re-linked, the
    case item's stored head updated: chain and head agree, the checkpoint does not."""
    x, a, _ = history
    stream = f"CASE#{a.case_id}"
    events = audit_events(ddb, stream)
    previous = events[0]
    for event in events[1:]:
        event = {**event, "prev_hash": previous["hash"]}
        if event["seq"] == 2:
            event["reason_text"] = "rewritten"
        event["hash"] = event_hash(event)
        ddb.client.put_item(TableName=ddb.tables.audit_events, Item=to_item(event))
        previous = event
    ddb.client.update_item(
        TableName=ddb.tables.cases,
        Key={"case_id": {"S": a.case_id}},
        UpdateExpression="SET audit_head = :h",
        ExpressionAttributeValues={":h": {"S": previous["hash"]}},
    )
    checkpoint = checkpoint_of(ddb, x)
    assert verify() == [
        f"checkpoint {label(x)} (SYSTEM seq {checkpoint['seq']}): stream {stream} seq 3: "
        f"expected hash {events[-1]['hash']} stored {previous['hash']}"
    ]


def test_the_open_period_is_the_blind_window(ddb, history):
    """What remains undetectable (docs/audit.md): in the period not yet checkpointed, a
    table writer who deletes a case's newest event *and* sets its item's stored head
    back goes unseen; the next checkpoint signs that state."""
    x, _, _ = history
    case = escalated_case("ck-c")  # in X+3, the open period
    stream = f"CASE#{case.case_id}"
    events = audit_events(ddb, stream)
    delete_event(ddb, stream, 3)
    ddb.client.update_item(
        TableName=ddb.tables.cases,
        Key={"case_id": {"S": case.case_id}},
        UpdateExpression="SET audit_seq = :s, audit_head = :h",
        ExpressionAttributeValues={":s": {"N": "2"}, ":h": {"S": events[1]["hash"]}},
    )
    assert verify() == []


@pytest.mark.parametrize("value", [0, 7, 299, 3601, 86401, 7 * 86400, True])
def test_a_period_that_does_not_divide_a_day_is_refused(settings, value):
    """The setting is checked by Django's system checks, by the task and by
    verify_audit, and the message says what would be accepted."""
    from reconciliation.audit.checkpoints import checkpoint_period_s

    settings.AUDIT_CHECKPOINT_PERIOD_S = value
    errors = [e for e in run_checks() if e.id == "reconciliation.E001"]
    assert len(errors) == 1 and "divide a day evenly" in errors[0].msg
    with pytest.raises(ImproperlyConfigured, match="AUDIT_CHECKPOINT_PERIOD_S"):
        checkpoint_period_s()
    with pytest.raises(CommandError, match="AUDIT_CHECKPOINT_PERIOD_S"):
        call_command("verify_audit", stdout=io.StringIO(), stderr=io.StringIO())


def test_quarter_hour_periods_and_the_beat_schedule(ddb, settings):
    """With 900 s periods the first run is due for every quarter hour from the first
    event's (none while there is no event); the default is an hour, and beat asks every
    5 minutes."""
    from django.conf import settings as live

    from reconciliation.audit.checkpoints import checkpoint_periods_due
    from tests.helpers import repositories

    assert live.AUDIT_CHECKPOINT_PERIOD_S == 3600
    [entry] = [
        e
        for e in live.CELERY_BEAT_SCHEDULE.values()
        if e["task"] == "reconciliation.tasks.audit.audit_checkpoint"
    ]
    assert entry["schedule"] <= 300
    assert not [e for e in run_checks() if e.id == "reconciliation.E001"]
    settings.AUDIT_CHECKPOINT_PERIOD_S = 900
    assert checkpoint_periods_due(repositories()) == []
    with at(clock.now() - 3 * HOUR + timedelta(seconds=420)):  # 09:07
        submit("quarter")
    due = checkpoint_periods_due(repositories())
    today = clock.now().date()
    assert [p.label for p in due[:2]] == [f"{today}T09:00Z", f"{today}T09:15Z"]
    assert all(p.end - p.start == timedelta(seconds=900) for p in due)
    assert (
        due[-1].end + timedelta(seconds=120)
        <= clock.now()
        < due[-1].end + timedelta(seconds=120 + 900)
    )
