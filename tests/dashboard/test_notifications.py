"""In-app notifications (docs/notes-and-notifications.md): "assigned to you",
"approval waiting for you", "your override was decided" (approved, rejected, expired) and
"@mention" reach exactly the right people and never the one who acted; each links to
its case; read state is per person; the navigation's badge is one indexed count; nobody
reads or marks another person's notifications; a failed notification fails no action."""

from __future__ import annotations

import logging
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.staff.models import Notification, NotificationKind
from reconciliation import clock
from reconciliation.audit.models import AuditAction
from reconciliation.casework.overrides import override_request, overrides_expire
from tests.helpers import AS_SYSTEM, acting, pass_second_factor, repositories, sign_in, staff_user
from tests.reconciliation.factories import stuck_case

# The dashboard's edge; the services' engine semantics are tested in tests/reconciliation.
pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

NOTE = {"reason_code": "CLIENT_CONFIRMED", "reason_text": "Checked with the client first."}


def _told() -> list[tuple[str, str, str, str, str]]:
    """Every notification as (recipient, kind, actor, action, override), sorted."""
    return sorted(
        (n.recipient.username, n.kind, n.actor, n.action, n.override)
        for n in Notification.objects.select_related("recipient")
    )


def _requested(key: str, by: str = "ann", role: str = "finance_staff"):
    case = stuck_case(key)
    return override_request(
        override="RELEASE_CLAIM", **acting(by, role).on(case, action_id=f"req-{key}", **NOTE)
    ).case


def _decision(case) -> dict:
    return {"request_id": case.override.request_id, "action_id": str(uuid.uuid4()), **NOTE}


def test_assignment_by_someone_else_tells_the_assignee_only(ddb, client):
    """A supervisor assigning a case to fay tells fay, linking the case; taking a case
    oneself tells nobody."""
    staff_user("fay", "finance_staff")
    case = stuck_case("nt-assign")
    boss = sign_in(client, "supervisor", username="boss")
    form = {"seen_version": case.version, "action_id": "a-1", "assignee": "fay"}
    assert client.post(f"/cases/{case.case_id}/assign/", form).status_code == 302
    assert _told() == [("fay", NotificationKind.ASSIGNED, "boss", AuditAction.CASE_ASSIGNED, "")]
    other = stuck_case("nt-take")
    take = {"seen_version": other.version, "action_id": "a-2"}
    assert client.post(f"/cases/{other.case_id}/assign/", take).status_code == 302
    assert repositories().cases.get(other.case_id).assignee == boss.username
    assert len(_told()) == 1


def test_override_request_tells_every_other_active_supervisor(ddb, client):
    """A supervisor's override request tells the other active supervisors: not the
    requester, not an inactive supervisor, not finance staff or auditors."""
    for name, role in (("sam", "supervisor"), ("sky", "supervisor"), ("fay", "finance_staff")):
        staff_user(name, role)
    staff_user("aud", "auditor")
    gone = staff_user("gone", "supervisor")
    gone.is_active = False
    gone.save()
    case = stuck_case("nt-request")
    sign_in(client, "supervisor", username="sue")
    form = {
        "override": "RELEASE_CLAIM",
        "seen_version": case.version,
        "action_id": "o-1",
        **NOTE,
    }
    assert client.post(f"/cases/{case.case_id}/override/", form).status_code == 302
    waiting = (NotificationKind.APPROVAL_WAITING, "sue", AuditAction.OVERRIDE_REQUESTED)
    assert _told() == [
        ("sam", *waiting, "RELEASE_CLAIM"),
        ("sky", *waiting, "RELEASE_CLAIM"),
    ]


@pytest.mark.parametrize(
    ("decide", "outcome"),
    [("approve", AuditAction.OVERRIDE_APPROVED), ("reject", AuditAction.OVERRIDE_REJECTED)],
)
def test_decision_tells_the_requester_only(ddb, client, decide, outcome):
    """Approving or rejecting ann's request tells ann how it was decided and by whom; the
    deciding supervisor is told nothing; the page words it without codes."""
    staff_user("ann", "finance_staff")
    case = _requested(f"nt-{decide}")
    sign_in(client, "supervisor", username="sam")
    response = client.post(f"/cases/{case.case_id}/{decide}/", _decision(case))
    assert response.status_code == 302
    assert _told() == [("ann", NotificationKind.OVERRIDE_DECIDED, "sam", outcome, "RELEASE_CLAIM")]
    client.force_login(Notification.objects.get().recipient)
    page = client.get("/notifications/").content.decode()
    assert "Your override was decided" in page and outcome.label in page
    assert "Release the claim" in page and "RELEASE_CLAIM" not in page


def test_expiry_tells_the_requester(ddb, settings):
    """An override request that expires in the sweep tells its requester, by system."""
    staff_user("ann", "finance_staff")
    case = _requested("nt-expire")
    with clock.travel(settings.OVERRIDE_TTL_S + 5):
        assert overrides_expire(store=AS_SYSTEM.store) == [case.case_id]
    assert _told() == [
        (
            "ann",
            NotificationKind.OVERRIDE_DECIDED,
            "system",
            AuditAction.OVERRIDE_EXPIRED,
            "RELEASE_CLAIM",
        )
    ]


def test_a_failed_notification_fails_no_action(ddb, client, monkeypatch, caplog):
    """With the notifications table refusing writes, the assignment still succeeds and
    the failure is logged."""
    staff_user("fay", "finance_staff")
    case = stuck_case("nt-fail")
    sign_in(client, "supervisor", username="boss")

    def refuse(*args, **kwargs):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(Notification.objects, "bulk_create", refuse)
    form = {"seen_version": case.version, "action_id": "a-1", "assignee": "fay"}
    with caplog.at_level(logging.ERROR, logger="dashboard.staff.notifications"):
        response = client.post(f"/cases/{case.case_id}/assign/", form)
    assert response.status_code == 302
    assert repositories().cases.get(case.case_id).assignee == "fay"
    assert "notification notify_assigned not created" in caplog.text
    assert Notification.objects.count() == 0


def _notify(username: str, case_id: str = "C-AAAAAAAAAAAAAAAA", **fields) -> Notification:
    from django.contrib.auth.models import User

    return Notification.objects.create(
        recipient=User.objects.get(username=username),
        kind=fields.pop("kind", NotificationKind.MENTION),
        case_id=case_id,
        actor=fields.pop("actor", "bob"),
        action=AuditAction.CASE_NOTE_ADDED,
        excerpt=fields.pop("excerpt", "@ann see this"),
    )


def test_opening_marks_read_and_goes_to_the_case(ddb, client):
    """The list shows the unread one as new with its words; opening it marks it read and
    redirects to its case; "Mark all read" marks the rest."""
    ann = sign_in(client, "finance_staff", username="ann")
    first = _notify("ann", "C-AAAAAAAAAAAAAAAA")
    _notify("ann", "C-BBBBBBBBBBBBBBBB", kind=NotificationKind.ASSIGNED, excerpt="")
    page = client.get("/notifications/").content.decode()
    assert page.count(">New<") == 2 and "Mentioned you" in page and "Assigned to you" in page
    assert f'href="/notifications/{first.pk}/"' in page
    response = client.get(f"/notifications/{first.pk}/")
    assert response.status_code == 302 and response["Location"] == "/cases/C-AAAAAAAAAAAAAAAA/"
    assert Notification.objects.get(pk=first.pk).read_at is not None
    assert Notification.objects.filter(recipient=ann).unread().count() == 1
    assert client.post("/notifications/read-all/").status_code == 302
    assert Notification.objects.filter(recipient=ann).unread().count() == 0
    assert ">New<" not in client.get("/notifications/").content.decode()


def test_badge_counts_unread_with_one_indexed_query(ddb, client):
    """The navigation shows the unread count for every staff role, read by one COUNT
    that the database answers from the ``notification_unread`` index."""
    bob = staff_user("bob", "finance_staff")
    for role in ("finance_staff", "supervisor", "auditor"):
        user = sign_in(client, role, username=f"u-{role}")
        for _ in range(3):
            _notify(user.username)
        _notify("bob")
        Notification.objects.filter(recipient=user).order_by("id").first().delete()
        with CaptureQueriesContext(connection) as queries:
            page = client.get("/notifications/").content.decode()
        assert 'aria-label="2 unread">2</span>' in page, role
        counts = [q["sql"] for q in queries if "COUNT" in q["sql"] and "notification" in q["sql"]]
        assert len(counts) == 1, counts
    # Asked of a person with a long history read, which the unread index skips: on a
    # table of a few rows PostgreSQL's planner reads the whole table or takes
    # ``notification_recent`` (both fine at that size), and the plan proves nothing.
    read = clock.now()
    Notification.objects.bulk_create(
        Notification(
            recipient=bob,
            kind=NotificationKind.MENTION,
            case_id="C-AAAAAAAAAAAAAAAA",
            actor="ann",
            action=AuditAction.CASE_NOTE_ADDED,
            read_at=read,
        )
        for _ in range(5000)
    )
    _notify("bob")
    if connection.vendor == "postgresql":
        # Fresh statistics, as autovacuum keeps them: without them the planner guesses
        # the row counts of a table just filled, and its choice follows the row width.
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Notification._meta.db_table}")
    plan = Notification.objects.filter(recipient_id=bob.pk, read_at__isnull=True).explain()
    assert "notification_unread" in plan, plan


def test_nobody_reads_or_marks_anothers_notifications(ddb, client):
    """Opening bob's notification as ann is a 404 that leaves it unread; ann's "Mark all
    read" leaves bob's unread; ann's list never shows bob's."""
    staff_user("bob", "finance_staff")
    theirs = _notify("bob", excerpt="for bob only")
    sign_in(client, "finance_staff", username="ann")
    assert client.get(f"/notifications/{theirs.pk}/").status_code == 404
    assert client.post("/notifications/read-all/").status_code == 302
    assert Notification.objects.get(pk=theirs.pk).read_at is None
    assert "for bob only" not in client.get("/notifications/").content.decode()
    assert client.get("/notifications/999999/").status_code == 404


def _request_by_page(client, key: str):
    """ann asks for RELEASE_CLAIM on a new stuck case through the case page."""
    case = stuck_case(key)
    sign_in(client, "finance_staff", username="ann")
    form = {"override": "RELEASE_CLAIM", "seen_version": case.version, "action_id": key, **NOTE}
    assert client.post(f"/cases/{case.case_id}/override/", form).status_code == 302
    return repositories().cases.get(case.case_id)


def _shown_new(client, user) -> tuple[bool, str]:
    """Whether ``user``'s notifications page shows a "New" badge, and the page."""
    client.force_login(user)
    pass_second_factor(client, user)
    page = client.get("/notifications/").content.decode()
    return '<span class="badge">New</span>' in page, page


@pytest.mark.parametrize(
    ("decide", "words"),
    [("approve", "override approved by sam"), ("reject", "override rejected by sam")],
)
def test_a_decided_request_is_no_longer_new_to_any_supervisor(ddb, client, decide, words):
    """Once sam decides ann's request, sky's "approval waiting" about it is no longer
    new (badge and list) and says how and by whom it was decided; sam's too (the client
    is signed in as sam when deciding: ``_shown_new`` left it so)."""
    sam, sky = staff_user("sam", "supervisor"), staff_user("sky", "supervisor")
    case = _request_by_page(client, f"nt-settle-{decide}")
    assert _shown_new(client, sky)[0] and _shown_new(client, sam)[0]
    assert client.post(f"/cases/{case.case_id}/{decide}/", _decision(case)).status_code == 302
    for user in (sky, sam):
        new, page = _shown_new(client, user)
        assert not new, user.username
        assert f"Decided since: {words}." in page
        assert 'aria-label="1 unread"' not in page
    waiting = Notification.objects.filter(kind=NotificationKind.APPROVAL_WAITING)
    assert waiting.count() == 2 and not waiting.unread().exists()


def test_an_expired_request_is_no_longer_new_to_any_supervisor(ddb, client, settings):
    """The sweep expiring ann's request settles every supervisor's notification of it."""
    sky = staff_user("sky", "supervisor")
    case = _request_by_page(client, "nt-settle-expire")
    with clock.travel(settings.OVERRIDE_TTL_S + 5):
        assert overrides_expire(store=AS_SYSTEM.store) == [case.case_id]
    new, page = _shown_new(client, sky)
    assert not new and "Decided since: override request expired by system." in page


def test_a_newer_request_stays_new_when_an_older_one_is_decided(ddb, client):
    """Settling a request leaves another request's notifications on the same case new."""
    sky = staff_user("sky", "supervisor")
    case = _request_by_page(client, "nt-settle-newer")
    from dashboard.staff.notifications import notify_override_decided, notify_override_requested

    newer = case.override.__class__.from_json({**case.override.to_json(), "request_id": "r-2"})
    notify_override_requested(
        case_id=case.case_id, request=newer, override="RELEASE_CLAIM", actor="ann"
    )
    notify_override_decided(
        case_id=case.case_id,
        request=case.override,
        action=AuditAction.OVERRIDE_REJECTED,
        actor="sam",
    )
    mine = Notification.objects.filter(recipient=sky)
    assert [(n.request_id, n.is_unread) for n in mine.order_by("id")] == [
        (case.override.request_id, False),
        ("r-2", True),
    ]
