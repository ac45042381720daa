"""The supervisors' daily e-mail: override requests waiting and cases
past their queue's SLA, read with Queries from seeded cases under a frozen clock; sent to
active supervisors with an address only; scheduled daily by beat; SLAs checked at start."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from celery.schedules import crontab
from django.core import mail
from django.core.management import call_command

from reconciliation import clock
from reconciliation.apps import queue_sla_check
from reconciliation.cases.vocabulary import Override, Queue
from reconciliation.casework.notifications import (
    InvalidSla,
    digest_message,
    digest_send,
    is_past_sla,
    sla_parse,
    supervisor_digest,
)
from reconciliation.casework.overrides import override_request
from tests.helpers import AS_SYSTEM, acting, staff_user
from tests.reconciliation.factories import ambiguous_case, stuck_case

pytestmark = [pytest.mark.usefixtures("midday")]
HOUR = 3600


def seed(ddb) -> dict:
    """Stuck cases opened 5 h, 3 h and 0 h ago, an ambiguous one 3 h ago, and an override
    request raised on a fifth case (it waits in the approval queue)."""
    with clock.travel(-5 * HOUR):
        old = stuck_case("nt-old")
    with clock.travel(-3 * HOUR):
        middle = stuck_case("nt-mid")
    stuck_case("nt-new")
    asked = stuck_case("nt-ask")
    override_request(
        override="RELEASE_CLAIM",
        **acting("ada").on(
            asked,
            reason_code="CLIENT_CONFIRMED",
            reason_text="The client wants to retry.",
            action_id="nt",
        ),
    )
    # Last: each sweep above would auto-resolve it (its commit did apply).
    with clock.travel(-3 * HOUR):
        ambiguous = ambiguous_case("nt-amb")
    return {"old": old, "middle": middle, "ambiguous": ambiguous, "asked": asked}


@pytest.mark.engines("moto")
def test_digest_lists_waiting_requests_and_cases_past_each_queues_sla(ddb):
    """With stuck at the default 4 h and ambiguous at 2 h, the 5 h stuck case and the 3 h
    ambiguous case are past SLA, the 3 h and fresh stuck cases are not, and the override
    request is listed as waiting."""
    cases = seed(ddb)
    digest = supervisor_digest(store=AS_SYSTEM.store, hours=sla_parse("ambiguous=2"))
    assert [r.case_id for r in digest.waiting] == [cases["asked"].case_id]
    assert digest.waiting_count == 1
    past = {b.queue: (b.sla_hours, b.count, [r.case_id for r in b.oldest]) for b in digest.past_sla}
    assert past == {
        Queue.STUCK_PENDING: (Decimal(4), 1, [cases["old"].case_id]),
        Queue.AMBIGUOUS_TIMEOUT: (Decimal(2), 1, [cases["ambiguous"].case_id]),
    }
    assert digest.past_sla_count == 2
    # An hour later the 3 h stuck case crosses 4 h as well; oldest first.
    with clock.travel(HOUR + 1):
        later = supervisor_digest(store=AS_SYSTEM.store, hours=sla_parse("ambiguous=2"))
    [stuck] = [b for b in later.past_sla if b.queue == Queue.STUCK_PENDING]
    assert stuck.count == 2
    assert [r.case_id for r in stuck.oldest] == [cases["old"].case_id, cases["middle"].case_id]

    subject, body = digest_message(digest, site_url="https://pledges.example.org/")
    assert subject == "Pledge reconciliation: 1 override request waiting, 2 cases past SLA"
    assert f"https://pledges.example.org/cases/{cases['asked'].case_id}/" in body
    assert f"{Override.RELEASE_CLAIM.label} on {cases['asked'].case_id}, by ada" in body
    assert (
        f"{Queue.STUCK_PENDING.label} (SLA 4 hours): 1 — "
        "https://pledges.example.org/queues/stuck/?min_age_h=4"
    ) in body
    assert f"https://pledges.example.org/cases/{cases['old'].case_id}/" in body
    assert cases["middle"].case_id not in body


@pytest.mark.engines("moto")
def test_past_sla_matches_the_digest_boundary(ddb):
    """A case is past SLA once it has been open longer than its queue's hours."""
    now = clock.now()
    hours = sla_parse("stuck=1")
    just_over = clock.iso(now - timedelta(seconds=HOUR + 1))
    just_under = clock.iso(now - timedelta(seconds=HOUR - 1))
    assert is_past_sla(Queue.STUCK_PENDING, just_over, hours=hours, now=now)
    assert not is_past_sla(Queue.STUCK_PENDING, just_under, hours=hours, now=now)
    assert not is_past_sla(Queue.OVERRIDE_REQUESTED, just_over, hours=hours, now=now)


@pytest.mark.django_db
@pytest.mark.engines("moto")
def test_digest_email_goes_to_active_supervisors_with_an_address_only(ddb, settings):
    """One e-mail per active supervisor with an address; finance staff, auditors, an
    inactive supervisor and one without an address get none."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.SITE_URL = "https://pledges.example.org"
    cases = seed(ddb)
    staff_user("sup1", "supervisor", email="sup1@example.org")
    staff_user("sup2", "supervisor", email="sup2@example.org")
    gone = staff_user("sup3", "supervisor", email="sup3@example.org")
    gone.is_active = False
    gone.save()
    silent = staff_user("sup4", "supervisor")
    silent.email = ""
    silent.save()
    staff_user("fin", "finance_staff", email="fin@example.org")
    staff_user("aud", "auditor", email="aud@example.org")

    sent = digest_send(store=AS_SYSTEM.store)

    assert sorted(m.to[0] for m in mail.outbox) == ["sup1@example.org", "sup2@example.org"]
    assert all(len(m.to) == 1 and not m.cc and not m.bcc for m in mail.outbox)
    message = mail.outbox[0]
    assert message.subject.endswith("1 override request waiting, 1 case past SLA")
    assert cases["asked"].case_id in message.body and cases["old"].case_id in message.body
    assert sent.recipients == ["sup1@example.org", "sup2@example.org"]


@pytest.mark.django_db
@pytest.mark.engines("moto")
def test_nothing_to_report_sends_nothing(ddb, settings):
    """No request waiting and nothing past SLA: no e-mail, and the command says so."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    staff_user("sup1", "supervisor")
    stuck_case("nt-fresh")
    call_command("notify_supervisors")
    assert mail.outbox == []


@pytest.mark.django_db
@pytest.mark.engines("moto")
def test_notify_supervisors_command_sends_now(ddb, settings, capsys):
    """``manage.py notify_supervisors`` sends the digest at once and says to how many."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    staff_user("sup1", "supervisor")
    with clock.travel(-5 * HOUR):
        stuck_case("nt-cmd")
    call_command("notify_supervisors")
    assert len(mail.outbox) == 1
    assert "0 waiting, 1 past SLA; sent to 1 supervisor\n" in capsys.readouterr().out


def test_beat_sends_the_digest_daily_at_the_configured_hour(settings):
    """The beat schedule holds the daily digest at SUPERVISOR_DIGEST_HOUR, and the task
    it names is registered."""
    from dashboard.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["supervisor-digest"]
    assert entry["task"] == "reconciliation.tasks.cases.supervisor_digest_task"
    assert entry["schedule"] == crontab(minute=0, hour=settings.SUPERVISOR_DIGEST_HOUR)
    assert entry["task"] in app.tasks


@pytest.mark.parametrize(
    "value",
    ["stuk=4", "stuck", "stuck=0", "stuck=-1", "stuck=soon", "ambiguous=nan"],
)
def test_a_malformed_sla_is_refused_at_start(settings, value):
    """QUEUE_SLA_HOURS naming an unknown queue or no positive hours fails the check."""
    settings.QUEUE_SLA_HOURS = value
    [error] = queue_sla_check()
    assert error.id == "reconciliation.E002"
    with pytest.raises(InvalidSla):
        sla_parse(value)


def test_sla_setting_accepts_slugs_queue_names_and_fractions(settings):
    """Slugs and queue names both work; every other queue keeps the default."""
    hours = sla_parse("stuck=4, AMBIGUOUS_TIMEOUT=1.5", default_hours="6")
    assert hours[Queue.STUCK_PENDING] == 4
    assert hours[Queue.AMBIGUOUS_TIMEOUT] == Decimal("1.5")
    assert hours[Queue.ESCALATED] == 6
    settings.QUEUE_SLA_HOURS = "stuck=4,ambiguous=2"
    settings.SUPERVISOR_DIGEST_HOUR = 7
    assert queue_sla_check() == []
    settings.SUPERVISOR_DIGEST_HOUR = 24
    assert [e.id for e in queue_sla_check()] == ["reconciliation.E003"]
