"""Notes on a case (docs/notes-and-notifications.md): finance staff and
supervisors post free text on a case; each note is a hash-chained audit event on the
case's stream that keeps the case's stored head in step (``verify_audit`` passes) without
a new case version; auditors are read-only; ``@name`` of active staff notifies them."""

from __future__ import annotations

import pytest

from dashboard.staff.models import Notification, NotificationKind
from reconciliation.audit.models import AuditAction
from reconciliation.cases.actions import ActionResult
from reconciliation.cases.changes import CaseChanged, CaseError, NotAllowed
from reconciliation.cases.vocabulary import Disposition, Override
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.casework.notes import MAX_NOTE_LENGTH, case_note_add
from reconciliation.casework.overrides import override_approve, override_request
from tests.helpers import (
    acting,
    audit_events,
    race,
    repositories,
    run_verify,
    sign_in,
    staff_user,
)
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.django_db]

WHY = dict(reason_code="EVIDENCE_CONFIRMS", reason_text="Checked the consistent reads.")


def _notes(ddb, case_id: str) -> list[dict]:
    events = audit_events(ddb, f"CASE#{case_id}")
    return [e for e in events if e["action"] == AuditAction.CASE_NOTE_ADDED]


@pytest.mark.engines("moto")
def test_staff_note_is_an_audited_event_shown_in_the_timeline(ddb, client):
    """A note posted by finance staff is stored stripped as a note event by them on the
    case's stream, the case's stored head moves to it while its version stays, and the
    case page's timeline shows the text with its author; the chain is intact."""
    case = stuck_case("note-1")
    sign_in(client, "finance_staff", username="ann")
    response = client.post(
        f"/cases/{case.case_id}/notes/", {"text": "  Called the donor's bank: <b>pending</b>.  "}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/cases/{case.case_id}/#timeline"
    [note] = _notes(ddb, case.case_id)
    assert note["detail"]["note"] == "Called the donor's bank: <b>pending</b>."
    assert note["actor"]["username"] == "ann" and note["actor"]["role"] == "finance_staff"
    stored = repositories().cases.get(case.case_id)
    assert (stored.audit_seq, stored.audit_head) == (note["seq"], note["hash"])
    assert stored.version == case.version and stored.last_actor == case.last_actor
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    timeline = page[page.index('id="timeline"') :]
    assert "Note added" in timeline and "by ann" in timeline
    assert "Called the donor&#x27;s bank: &lt;b&gt;pending&lt;/b&gt;." in timeline
    assert "Hash chain intact" in timeline


@pytest.mark.engines("moto")
def test_htmx_note_answers_the_timeline_alone(ddb, client):
    """Posted with htmx, the answer is the timeline section with the new note and a
    fresh, empty form, plus the message out of band: no reload, not the whole page."""
    case = stuck_case("note-2")
    sign_in(client, "supervisor", username="sue")
    response = client.post(
        f"/cases/{case.case_id}/notes/", {"text": "Looking at it."}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="timeline"')
    assert "Looking at it." in body and 'id="summary-h"' not in body
    assert 'hx-swap-oob="true"' in body and "Note added." in body
    assert "Looking at it.</textarea>" not in body


@pytest.mark.engines("moto")
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "it is empty"),
        (" \n\t ", "it is empty"),
        ("\u200b\u200b\u200b", "it is empty"),
        ("x" * (MAX_NOTE_LENGTH + 1), "Keep the note to 2,000 characters; it has 2,001"),
    ],
    ids=["empty", "blank", "invisible", "too-long"],
)
def test_bad_note_is_refused_and_writes_nothing(ddb, client, text, words):
    """Empty, blank, invisible or longer than 2,000 characters: 400 with the reason by
    the box (plain and htmx, the text kept to correct it), and nothing written."""
    case = stuck_case(f"note-bad-{len(text)}")
    sign_in(client, "finance_staff", username="ann")
    before = audit_events(ddb, f"CASE#{case.case_id}")
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client.post(f"/cases/{case.case_id}/notes/", {"text": text}, **headers)
        assert response.status_code == 400, headers
        assert words in response.content.decode()
    assert audit_events(ddb, f"CASE#{case.case_id}") == before
    assert repositories().cases.get(case.case_id) == case


@pytest.mark.engines("moto")
def test_exactly_2000_characters_is_a_note(ddb):
    """The bound is inclusive: 2,000 characters are kept whole."""
    case = stuck_case("note-max")
    text = "y" * MAX_NOTE_LENGTH
    case_note_add(text=text, **acting("ann").on(case, seen_version=None))
    assert [n["detail"]["note"] for n in _notes(ddb, case.case_id)] == [text]


@pytest.mark.engines("moto")
def test_auditor_may_not_note(ddb, client):
    """Auditors are read-only: no note form on their case page, the POST is 403 and the
    service refuses them too; nothing is written."""
    case = stuck_case("note-aud")
    sign_in(client, "auditor", username="aud")
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert 'name="text"' not in page
    response = client.post(f"/cases/{case.case_id}/notes/", {"text": "I see a problem."})
    assert response.status_code == 403
    with pytest.raises(NotAllowed):
        case_note_add(
            text="I see a problem.", **acting("aud", "auditor").on(case, seen_version=None)
        )
    assert _notes(ddb, case.case_id) == []


@pytest.mark.engines("moto")
def test_unknown_case_is_404_and_writes_nothing(ddb, client):
    sign_in(client, "finance_staff", username="ann")
    response = client.post("/cases/C-AAAAAAAAAAAAAAAA/notes/", {"text": "Hello."})
    assert response.status_code == 404
    assert audit_events(ddb) == []


@pytest.mark.engines("moto")
def test_same_form_submitted_twice_adds_one_note(ddb, client):
    """A double submission (same action id) adds the note once."""
    case = stuck_case("note-dup")
    sign_in(client, "finance_staff", username="ann")
    form = {"text": "Once.", "action_id": "note-form-1"}
    for _ in range(2):
        assert client.post(f"/cases/{case.case_id}/notes/", form).status_code == 302
    assert len(_notes(ddb, case.case_id)) == 1


@pytest.mark.engines("moto")
def test_verify_audit_passes_with_notes_between_changes_and_after_resolution(ddb):
    """Notes interleaved with an assignment, an override request and its approval, and
    one on the resolved case: the override stays approvable (a note takes no version),
    every event chains, and ``verify_audit`` finds the case item in step with its
    stream."""
    ann, sue, sam = acting("ann"), acting("sue", "supervisor"), acting("sam", "supervisor")
    case = stuck_case("note-chain")

    def note(text: str, actor=ann) -> None:
        case_note_add(text=text, **actor.on(case, seen_version=None))

    note("First look.")
    assigned = case_assign(**ann.on(case))
    note("Taking it.")
    requested = override_request(
        override=Override.RELEASE_CLAIM,
        **ann.on(case, seen_version=assigned.case.version, **WHY),
    )
    note("@sue please approve.", sue)
    approved = override_approve(
        request_id=requested.case.override.request_id,
        **sam.on(case, seen_version=None, **WHY),
    )
    assert approved.applied and approved.case.is_resolved
    note("Closed; donor told.")
    events = audit_events(ddb, f"CASE#{case.case_id}")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["action"] for e in events].count(AuditAction.CASE_NOTE_ADDED) == 4
    assert all(e["prev_hash"] == p["hash"] for p, e in zip(events, events[1:], strict=False))
    stored = repositories().cases.get(case.case_id)
    assert (stored.audit_seq, stored.audit_head) == (events[-1]["seq"], events[-1]["hash"])
    code, lines = run_verify()
    assert code == 0, lines


@pytest.mark.dynamodb_local_only
def test_notes_racing_a_disposition_keep_one_chain(ddb):
    """Three notes and a disposition released at once: a note that lost the head re-reads
    and appends after the winner (so at least two of three land: three tries each); the
    disposition lands or, if a note took its seq first, is refused as a changed case
    with nothing written; the stream and the case's stored head stay one chain."""
    case = stuck_case("note-race")

    def note(n: int):
        return lambda: case_note_add(
            text=f"Note {n}.", **acting(f"s{n}").on(case, seen_version=None)
        )

    def dispose():
        return case_dispose(disposition=Disposition.ESCALATE, **acting("ann").on(case, **WHY))

    *noted, disposed = race(note(1), note(2), note(3), dispose)
    landed = [f"Note {n}." for n, o in enumerate(noted, 1) if isinstance(o, ActionResult)]
    assert all(isinstance(o, (ActionResult, CaseError)) for o in noted), noted
    assert len(landed) >= 2
    assert sorted(n["detail"]["note"] for n in _notes(ddb, case.case_id)) == landed
    assert isinstance(disposed, (ActionResult, CaseChanged)), disposed
    stored = repositories().cases.get(case.case_id)
    escalated = isinstance(disposed, ActionResult)
    assert stored.state == ("ESCALATED" if escalated else "OPEN")
    events = audit_events(ddb, f"CASE#{case.case_id}")
    assert len(events) == 1 + len(landed) + int(escalated)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert (stored.audit_seq, stored.audit_head) == (events[-1]["seq"], events[-1]["hash"])
    assert run_verify()[0] == 0


@pytest.mark.engines("moto")
def test_mention_notifies_only_active_staff_and_marks_them(ddb, client):
    """``@bob`` (finance staff) and ``@aud`` (an auditor) are told; ``@ghost`` (nobody),
    ``@old`` (inactive), ``@ann`` (the author) and an e-mail address are not, and stay
    plain text in the timeline, where the two notified names are marked."""
    staff_user("bob", "finance_staff")
    staff_user("aud", "auditor")
    staff_user("old", "finance_staff").__class__.objects.filter(username="old").update(
        is_active=False
    )
    staff_user("nog", None)
    case = stuck_case("note-mention")
    sign_in(client, "finance_staff", username="ann")
    text = "@bob and @aud: see x@bob.org; not @ghost, @old, @nog or me @ann."
    assert client.post(f"/cases/{case.case_id}/notes/", {"text": text}).status_code == 302
    told = Notification.objects.order_by("recipient__username")
    assert [(n.recipient.username, n.kind) for n in told] == [
        ("aud", NotificationKind.MENTION),
        ("bob", NotificationKind.MENTION),
    ]
    assert {(n.case_id, n.actor, n.excerpt) for n in told} == {(case.case_id, "ann", text)}
    [note] = _notes(ddb, case.case_id)
    assert note["detail"]["mentions"] == ["aud", "bob"]
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert '<strong class="mention">@bob</strong>' in page
    assert '<strong class="mention">@aud</strong>' in page
    assert "not @ghost, @old, @nog or me @ann." in page


@pytest.mark.engines("moto")
def test_mentions_match_usernames_in_any_letter_case(ddb, client):
    """``@Supervisor`` and ``@BOB`` tell ``supervisor`` and ``bob`` (before: nobody), are
    marked in the timeline as written, and the note stores the accounts' usernames."""
    staff_user("supervisor", "supervisor")
    staff_user("bob", "finance_staff")
    case = stuck_case("note-mention-case")
    sign_in(client, "finance_staff", username="ann")
    text = "@Supervisor please check; cc @BOB."
    assert client.post(f"/cases/{case.case_id}/notes/", {"text": text}).status_code == 302
    told = sorted(n.recipient.username for n in Notification.objects.all())
    assert told == ["bob", "supervisor"]
    [note] = _notes(ddb, case.case_id)
    assert note["detail"]["mentions"] == ["bob", "supervisor"]
    page = client.get(f"/cases/{case.case_id}/").content.decode()
    assert '<strong class="mention">@Supervisor</strong>' in page
    assert '<strong class="mention">@BOB</strong>' in page


@pytest.mark.engines("moto")
def test_an_exact_username_wins_over_one_in_another_case(ddb, client):
    """Two accounts that differ only in case: ``@Bob`` tells ``Bob`` alone."""
    staff_user("bob", "finance_staff")
    staff_user("Bob", "finance_staff")
    case = stuck_case("note-mention-exact")
    sign_in(client, "finance_staff", username="ann")
    client.post(f"/cases/{case.case_id}/notes/", {"text": "@Bob see this"})
    assert [n.recipient.username for n in Notification.objects.all()] == ["Bob"]


@pytest.mark.engines("moto")
def test_the_note_form_names_the_mentions_that_told_nobody(ddb, client):
    """The note is added, and the answer says which ``@name``s told nobody (unknown,
    inactive, without a staff role); a known name and the author's own are not listed.
    With htmx the message comes back with the timeline."""
    staff_user("bob", "finance_staff")
    staff_user("old", "finance_staff").__class__.objects.filter(username="old").update(
        is_active=False
    )
    case = stuck_case("note-mention-unknown")
    sign_in(client, "finance_staff", username="ann")
    text = "@bob, @ghost and @old: and me, @ann."
    page = client.post(f"/cases/{case.case_id}/notes/", {"text": text}, follow=True)
    html = page.content.decode()
    assert "Nobody was notified for @ghost, @old: no active colleague has that username." in html
    assert [n.recipient.username for n in Notification.objects.all()] == ["bob"]
    partial = client.post(
        f"/cases/{case.case_id}/notes/", {"text": "ask @nobody"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Nobody was notified for @nobody" in partial
    assert len(_notes(ddb, case.case_id)) == 2
