"""Truncating or rewriting the end of the audit trail: every subject item stores its
stream's head, and verification compares them (docs/design.md §7). A chain checks only
the events it holds, so a trail cut short would otherwise verify as a shorter, intact
one."""

from __future__ import annotations

import pytest

from reconciliation.audit.models import AuditEvent
from reconciliation.audit.repository import audit_event_build
from reconciliation.audit.verify import audit_verify
from reconciliation.cases.vocabulary import Disposition, Override
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.casework.overrides import override_approve, override_request
from tests.helpers import AS_SYSTEM, acting, audit_events, delete_event, repositories, run_verify
from tests.reconciliation.factories import ambiguous_case, stuck_case

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("midday")]

STAFF = acting("ada")
SUPER = acting("sue", "supervisor")
WHY = dict(reason_code="EVIDENCE_CONFIRMS", reason_text="Checked the consistent reads.")


def case_with_three_events(key: str):
    """A stuck case, assigned and escalated: its item stores audit_seq 3."""
    case = stuck_case(key)
    case = case_assign(**STAFF.on(case)).case
    case = case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(case, **WHY)).case
    assert case.audit_seq == 3
    return case


def voided_pledge(ddb, key: str, settings) -> tuple[str, list[dict]]:
    """A committed pledge voided by an approved override: its stream holds the receipt
    and the void, its item stores audit_seq 2."""
    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case(key)
    requested = override_request(
        override=Override.VOID_PLEDGE,
        **STAFF.on(
            case, reason_code="DONOR_REQUEST", reason_text="Donor withdrew the pledge by phone."
        ),
    )
    override_approve(
        request_id=requested.case.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
    )
    stream = f"PLEDGE#{case.intent_id}"
    return stream, audit_events(ddb, stream)


def test_deleting_the_newest_case_event_fails_verify_naming_the_stored_head(ddb):
    """Deleting the newest event of a CASE# stream leaves an intact chain; verification
    fails naming the stream, the head the case item stores and where the stream ends,
    with and without --stream."""
    case = case_with_three_events("trunc-case-1")
    stream = f"CASE#{case.case_id}"
    events = audit_events(ddb, stream)
    delete_event(ddb, stream, 3)
    line = (
        f"{stream}: the case item stores audit_seq 3 but the stream ends at seq 2 "
        f"(audit_head {events[2]['hash']}, stream's last hash {events[1]['hash']})"
    )
    assert run_verify() == (1, [line])
    assert run_verify("--stream", stream) == (1, [line])


def test_deleting_the_newest_pledge_event_fails_verify_naming_the_stored_head(ddb, settings):
    """Deleting the void of a voided pledge leaves its receipt, a chain of one; the
    pledge item still stores audit_seq 2, so verification names the truncation."""
    stream, events = voided_pledge(ddb, "trunc-pledge-1", settings)
    assert [e["action"] for e in events] == ["pledge_recorded", "pledge_voided"]
    delete_event(ddb, stream, 2)
    code, lines = run_verify()
    assert code == 1
    assert lines == [
        f"{stream}: the pledge item stores audit_seq 2 but the stream ends at seq 1 "
        f"(audit_head {events[1]['hash']}, stream's last hash {events[0]['hash']})"
    ]


def test_a_pledge_stream_deleted_outright_is_found_through_its_case(ddb, settings):
    """A pledge's whole stream deleted leaves nothing in by_day; the case that names
    the intent leads verification to the pledge item, whose stored head has no stream."""
    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("trunc-pledge-2")
    stream = f"PLEDGE#{case.intent_id}"
    [receipt] = audit_events(ddb, stream)
    delete_event(ddb, stream, 1)
    report = audit_verify(store=AS_SYSTEM.store)
    assert report.problems == [
        f"{stream}: the pledge item stores audit_seq 1 but the stream has no events "
        f"(audit_head {receipt['hash']})"
    ]


def test_rewritten_stream_and_a_stream_without_its_item_are_named(ddb):
    """A consistent rewrite of the newest event (hash recomputed, item untouched) and a
    case item deleted with its newest event are each named by their stream."""
    rewritten = case_with_three_events("trunc-case-2")
    orphaned = case_with_three_events("trunc-case-3")
    name = f"CASE#{rewritten.case_id}"
    last = audit_events(ddb, name)[-1]
    forged = audit_event_build(
        AuditEvent(
            action="case_escalated",
            actor=STAFF.actor,
            case_id=rewritten.case_id,
            reason_code="EVIDENCE_CONFIRMS",
            reason_text="rewritten",
        ),
        stream=name,
        seq=3,
        prev_hash=last["prev_hash"],
    )
    delete_event(ddb, name, 3)
    assert repositories().audit.append(forged)
    other = f"CASE#{orphaned.case_id}"
    delete_event(ddb, other, 3)
    ddb.client.delete_item(TableName=ddb.tables.cases, Key={"case_id": {"S": orphaned.case_id}})
    assert sorted(audit_verify(store=AS_SYSTEM.store).problems) == sorted(
        [
            f"{name}: the case item's audit_head is not the hash of seq 3 "
            f"(audit_head {last['hash']}, stream's seq 3 hash {forged['hash']})",
            f"{other}: 2 events but no case item to store the stream's head",
        ]
    )


def test_an_event_appended_past_the_stored_head_is_named(ddb):
    """An event appended with a correct link but without its case change runs past the
    head the case item stores (and stays past it when the item is read again)."""
    case = case_with_three_events("trunc-case-4")
    name = f"CASE#{case.case_id}"
    last = audit_events(ddb, name)[-1]
    extra = audit_event_build(
        AuditEvent(action="case_escalated", actor=STAFF.actor),
        stream=name,
        seq=4,
        prev_hash=last["hash"],
    )
    assert repositories().audit.append(extra)
    assert audit_verify(stream=name, store=AS_SYSTEM.store).problems == [
        f"{name}: the stream runs to seq 4, past the case item's audit_seq 3 "
        f"(audit_head {last['hash']})"
    ]


def test_a_stream_ahead_of_a_stale_item_read_is_read_again_not_reported():
    """The item was read, then a change committed, then the stream was read: the stream
    is one event ahead of the stale head; the item read again holds the new head."""
    from reconciliation.audit.chains import SubjectHead, subject_chain_status

    first = audit_event_build(
        AuditEvent(action="case_opened", actor=STAFF.actor),
        stream="CASE#c1",
        seq=1,
        prev_hash="0" * 64,
    )
    second = audit_event_build(
        AuditEvent(action="case_assigned", actor=STAFF.actor),
        stream="CASE#c1",
        seq=2,
        prev_hash=first["hash"],
    )
    stale = SubjectHead("case", 1, first["hash"])
    fresh = SubjectHead("case", 2, second["hash"])
    status = subject_chain_status("CASE#c1", [first, second], stale, reread=lambda: fresh)
    assert status.ok, status.line()
    status = subject_chain_status("CASE#c1", [first, second], stale, reread=lambda: stale)
    assert not status.ok and status.head
