"""Dispositions, four-eyes overrides, assignment, bulk work, concurrency and the role
matrix of every case service."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import partial

import pytest

from reconciliation import clock
from reconciliation.actors import Role, system_actor
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.changes import CaseChanged, CaseError, InvalidReason, NotAllowed
from reconciliation.cases.models import CommitRetry
from reconciliation.cases.vocabulary import Disposition, Override
from reconciliation.casework.dispositions import (
    case_assign,
    case_dispose,
    case_unassign,
    cases_bulk,
)
from reconciliation.casework.overrides import (
    override_approve,
    override_reject,
    override_request,
    overrides_expire,
)
from reconciliation.casework.selectors import InvalidFilter, QueueFilters, queue_page
from tests.conftest import staff_actor
from tests.helpers import (
    AS_SYSTEM,
    Acting,
    acting,
    audit_events,
    claims,
    ledger_total,
    pledges,
    race,
    repositories,
)
from tests.reconciliation.factories import ambiguous_case, key_reuse_case, stuck_case, submit

pytestmark = pytest.mark.django_db(databases=[])

STAFF = acting("ada")
STAFF2 = acting("bob")
SUPER = acting("sue", "supervisor")
SUPER2 = acting("sam", "supervisor")
AUDITOR = staff_actor("aud", "auditor")
WHY = dict(reason_code="EVIDENCE_CONFIRMS", reason_text="Checked the consistent reads.")


def _events(ddb, case_id: str) -> list[str]:
    return [e["action"] for e in audit_events(ddb, f"CASE#{case_id}")]


def test_confirm_committed_is_refused_without_the_pledge(ddb):
    """CONFIRMED_COMMITTED needs a consistent read to find the pledge; a stuck claim that
    never committed is refused and the case is unchanged."""
    case = stuck_case("cc-1")
    with pytest.raises(CaseError, match="no pledge"):
        case_dispose(disposition=Disposition.CONFIRMED_COMMITTED, **STAFF.on(case, **WHY))
    assert repositories().cases.get(case.case_id).version == case.version
    assert _events(ddb, case.case_id) == ["case_opened"]


def test_confirm_committed_resolves_and_finalises_claim(ddb, settings):
    """With the pledge present, the case resolves and a PENDING claim is finalised."""
    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("cc-2")
    result = case_dispose(disposition=Disposition.CONFIRMED_COMMITTED, **STAFF.on(case, **WHY))
    assert result.applied and result.case.state == "RESOLVED" and result.case.queue is None
    assert _events(ddb, case.case_id) == ["case_opened", "disposition_recorded"]
    assert claims(ddb)[0]["status"] == "COMPLETED"
    assert repositories().cases.counts()["AMBIGUOUS_TIMEOUT"] == 0


def test_confirm_committed_hands_back_the_claim_as_it_finalised_it(ddb, settings):
    """CONFIRMED_COMMITTED on a case whose claim is still PENDING reads the claim once,
    with the pledge, finalises it fenced on that read, and hands back the claim exactly
    as stored after its transaction (the page after it shows that, unread)."""
    from reconciliation.claims.models import ClaimStatus
    from reconciliation.dynamo import calls

    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("cc-3")
    ddb.client.update_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": case.claim_pk}},
        UpdateExpression="SET #st = :p",
        ExpressionAttributeNames={"#st": "status"},
        ExpressionAttributeValues={":p": {"S": ClaimStatus.PENDING}},
    )
    seen = repositories().claims.get(case.claim_pk)
    with calls.tally() as counted:
        result = case_dispose(disposition=Disposition.CONFIRMED_COMMITTED, **STAFF.on(case, **WHY))
    # The case, the pledge and the claim (consistent reads), and the one transaction.
    assert counted.calls == 4
    stored = repositories().claims.get(case.claim_pk)
    assert stored.status == ClaimStatus.COMPLETED and stored.version == seen.version + 1
    assert result.evidence.claim == stored
    assert result.evidence.pledge == repositories().pledges.get(case.intent_id)
    assert result.case == repositories().cases.get(case.case_id)


def test_retry_commit_commits_the_stuck_intent_once(ddb):
    """RETRY_COMMIT on a stuck claim re-runs the commit (task inline in tests): the pledge
    is recorded once, with the claim's original token, and the case resolves."""
    case = stuck_case("rc-1")
    token = claims(ddb)[0]["request_token"]
    result = case_dispose(disposition=Disposition.RETRY_COMMIT, **STAFF.on(case, **WHY))
    assert result.applied
    final = repositories().cases.get(case.case_id)
    assert final.state == "RESOLVED"
    assert final.resolution.outcome == "created"
    assert [p["request_token"] for p in pledges(ddb)] == [token]
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    assert _events(ddb, case.case_id) == [
        "case_opened",
        "retry_commit_requested",
        "retry_commit_succeeded",
    ]
    # A second retry request on the resolved case is refused; nothing is written twice.
    with pytest.raises(CaseError):
        case_dispose(
            disposition=Disposition.RETRY_COMMIT,
            **STAFF.on(case, seen_version=final.version, **WHY),
        )
    assert len(pledges(ddb)) == 1


def test_duplicate_rejected_ok_and_escalate(ddb):
    """DUPLICATE_REJECTED_OK resolves a cancelled case; ESCALATE moves a case to the
    escalated queue, where it can still be acted on."""
    dup = key_reuse_case(ddb, "dup-1")
    assert dup.case_type == "CANCELLED_TRANSACTION"
    done = case_dispose(disposition=Disposition.DUPLICATE_REJECTED_OK, **STAFF.on(dup, **WHY))
    assert done.case.state == "RESOLVED"
    stuck = stuck_case("esc-1")
    esc = case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(stuck, **WHY))
    assert esc.case.state == "ESCALATED" and esc.case.queue == "ESCALATED"
    counts = repositories().cases.counts()
    assert counts["ESCALATED"] == 1 and counts["STUCK_PENDING"] == 0
    assert counts["CANCELLED_TRANSACTION"] == 0


@pytest.mark.parametrize(
    "code,text,message",
    [
        ("", "long enough reason", "reason code"),
        ("NOPE", "long enough reason", "reason code"),
        ("OTHER", "too short", "10 characters"),
    ],
)
def test_reason_is_required(ddb, code, text, message):
    """A reason code from the fixed list and a text of at least 10 characters."""
    case = stuck_case("why-1")
    with pytest.raises(InvalidReason, match=message):
        case_dispose(
            disposition=Disposition.ESCALATE, **STAFF.on(case, reason_code=code, reason_text=text)
        )


def test_stale_version_is_refused_naming_who_changed_it(ddb):
    """Acting on a version someone else already changed: CaseChanged with who and when."""
    case = stuck_case("stale-1")
    case_assign(**STAFF2.on(case))
    with pytest.raises(CaseChanged) as info:
        case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(case, **WHY))
    assert "changed by bob at" in str(info.value)
    assert info.value.current.assignee == "bob"


def test_double_submission_of_one_action_has_one_effect(ddb):
    """The same action id submitted twice: one change, one event, the second a no-op."""
    case = stuck_case("dbl-1")
    first = case_dispose(
        disposition=Disposition.ESCALATE, **STAFF.on(case, action_id="act-1", **WHY)
    )
    second = case_dispose(
        disposition=Disposition.ESCALATE, **STAFF.on(case, action_id="act-1", **WHY)
    )
    assert first.applied and not second.applied
    assert second.case.version == first.case.version == case.version + 1
    assert _events(ddb, case.case_id) == ["case_opened", "case_escalated"]


# Race tests run where concurrency is real: moto's in-process backend is not thread-safe
# (see test_engine_conformance.py), so on moto they would test moto, not us.
@pytest.mark.dynamodb_local_only
def test_sixteen_people_acting_at_once_one_wins(ddb):
    """16 threads apply different dispositions to one case: exactly one commits, the case
    version goes up by one, one event is written; the others get CaseChanged."""
    case = stuck_case("race-1")
    options = [(Disposition.ESCALATE, None), (Disposition.RETRY_COMMIT, None)]

    def act(n: int) -> None:
        disposition, _ = options[n % 2]
        actor = staff_actor(f"user{n}")
        if n % 4 == 3:
            case_assign(**Acting(actor).on(case))
        else:
            case_dispose(disposition=disposition, **Acting(actor).on(case, **WHY))

    outcomes = race(*(partial(act, n) for n in range(16)))
    wins = [n for n, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    changed = [n for n, o in enumerate(outcomes) if isinstance(o, CaseChanged)]
    other = [repr(o) for n, o in enumerate(outcomes) if n not in wins and n not in changed]
    assert other == []
    assert len(wins) == 1 and len(changed) == 15
    stored = repositories().cases.get(case.case_id)
    assert stored.version >= case.version + 1
    events = audit_events(ddb, f"CASE#{case.case_id}")
    # One human event; a RETRY_COMMIT winner adds its own background outcome event.
    human = [e for e in events[1:] if e["actor"]["username"] != "system"]
    assert len(human) == 1 and human[0]["seq"] == 2


def test_release_claim_needs_a_different_supervisor(ddb):
    """RELEASE_CLAIM: staff request, the same person cannot approve, a supervisor can; the
    claim becomes FAILED and at once re-claimable, the case resolves."""
    case = stuck_case("rel-1")
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    assert requested.case.state == "OVERRIDE_REQUESTED" and requested.case.queue == (
        "OVERRIDE_REQUESTED"
    )
    request_id = requested.case.override.request_id
    with pytest.raises(NotAllowed):
        override_approve(request_id=request_id, **STAFF.on(case, seen_version=None, **WHY))
    approved = override_approve(request_id=request_id, **SUPER.on(case, seen_version=None, **WHY))
    assert approved.case.state == "RESOLVED"
    assert approved.case.resolution.disposition == Override.RELEASE_CLAIM
    [claim] = claims(ddb)
    assert claim["status"] == "FAILED" and claim["expires_at"] <= clock.epoch()
    # The client may retry now and commits.
    assert submit("rel-1").kind == "created"
    assert _events(ddb, case.case_id) == ["case_opened", "override_requested", "override_approved"]


def test_supervisor_cannot_approve_own_request(ddb):
    """Self-approval is refused in the service, for supervisors too, and so is rejecting
    one's own request (four eyes either way); another may approve."""
    case = stuck_case("self-1")
    requested = override_request(override=Override.RELEASE_CLAIM, **SUPER.on(case, **WHY))
    request_id = requested.case.override.request_id
    with pytest.raises(NotAllowed, match="different supervisor"):
        override_approve(request_id=request_id, **SUPER.on(case, seen_version=None, **WHY))
    with pytest.raises(NotAllowed, match="different supervisor"):
        override_reject(request_id=request_id, **SUPER.on(case, seen_version=None, **WHY))
    assert repositories().cases.get(case.case_id).state == "OVERRIDE_REQUESTED"
    assert (
        override_approve(
            request_id=request_id, **SUPER2.on(case, seen_version=None, **WHY)
        ).case.state
        == "RESOLVED"
    )


def test_approve_twice_is_refused(ddb):
    """A second approval (a different action) finds the request already decided."""
    case = stuck_case("twice-1")
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    request_id = requested.case.override.request_id
    override_approve(request_id=request_id, **SUPER.on(case, seen_version=None, **WHY))
    with pytest.raises(CaseError, match="no pending request"):
        override_approve(request_id=request_id, **SUPER2.on(case, seen_version=None, **WHY))
    assert _events(ddb, case.case_id).count("override_approved") == 1


def test_reject_returns_case_to_where_it_was(ddb):
    """Rejection returns the case to OPEN (its prior state), with the request cleared."""
    case = stuck_case("rej-1")
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    rejected = override_reject(
        request_id=requested.case.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
    )
    assert rejected.case.state == "OPEN" and rejected.case.override is None
    assert rejected.case.queue == "STUCK_PENDING"
    assert claims(ddb)[0]["status"] == "PENDING"


def test_request_expires_back_to_open_by_system(ddb, settings):
    """An override request older than OVERRIDE_TTL_S returns to OPEN with a system event."""
    case = stuck_case("exp-1")
    override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    assert overrides_expire(store=AS_SYSTEM.store) == []
    with clock.travel(settings.OVERRIDE_TTL_S + 5):
        assert overrides_expire(store=AS_SYSTEM.store) == [case.case_id]
    stored = repositories().cases.get(case.case_id)
    assert stored.state == "OPEN" and stored.override is None
    last = audit_events(ddb, f"CASE#{case.case_id}")[-1]
    assert last["action"] == "override_expired" and last["actor"]["role"] == "system"


def material_change(case_id: str):
    """A change of the case's evidence while a request is pending (a background retry's
    outcome recorded by the system)."""
    from reconciliation.cases.changes import case_commit_change
    from reconciliation.cases.transitions import Grounds, case_retry_failed

    repos = repositories()
    case = repos.cases.get(case_id)
    retry = CommitRetry(status="throttled", request_id="bg")
    return case_commit_change(
        repos, case, *case_retry_failed(case, Grounds(system_actor(), clock.now()), retry)
    )


@pytest.mark.parametrize("assign_after", [False, True])
def test_approval_after_the_case_changed_is_refused(ddb, assign_after):
    """A request is pinned to the case as it was raised: after a material change it is
    refused, also when an assignment follows the change."""
    case = stuck_case("pin-1")
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    changed = material_change(case.case_id)
    if assign_after:
        case_assign(**STAFF2.on(case, seen_version=changed.version))
    with pytest.raises(CaseError, match="changed since the request"):
        override_approve(
            request_id=requested.case.override.request_id,
            **SUPER.on(case, seen_version=None, **WHY),
        )


@pytest.mark.parametrize("unassign", [False, True])
def test_assignment_does_not_block_a_pending_override(ddb, unassign):
    """Request an override, someone assigns the case to themselves (and unassigns it):
    the supervisor's approval still applies, since nothing it depends on changed."""
    case = stuck_case("pin-2")
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    assigned = case_assign(**STAFF2.on(case, seen_version=requested.case.version))
    if unassign:
        case_unassign(**STAFF2.on(case, seen_version=assigned.case.version))
    result = override_approve(
        request_id=requested.case.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
    )
    assert result.applied and result.case.state == "RESOLVED"
    assert claims(ddb)[0]["status"] == "FAILED"


def test_void_pledge_reverses_ledger_in_the_same_transaction(ddb, settings):
    """VOID_PLEDGE (approved): pledge VOIDED, ledger back to zero, a chained PLEDGE event."""
    settings.AUTO_RESOLVE_COMMITTED = False
    case = ambiguous_case("void-1")
    assert ledger_total(ddb) == (Decimal("25.00"), 1)
    requested = override_request(
        override=Override.VOID_PLEDGE,
        **STAFF.on(
            case, reason_code="DONOR_REQUEST", reason_text="Donor withdrew the pledge by phone."
        ),
    )
    override_approve(
        request_id=requested.case.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
    )
    [pledge] = pledges(ddb)
    assert pledge["status"] == "VOIDED" and pledge["audit_seq"] == 2
    assert ledger_total(ddb) == (Decimal("0.00"), 0)
    receipt, void = audit_events(ddb, "PLEDGE#")
    assert void["action"] == "pledge_voided" and void["prev_hash"] == receipt["hash"]
    assert pledge["audit_head"] == void["hash"]


def test_reopen_a_resolved_case(ddb):
    """REOPEN is an override too: once approved the case is OPEN in its queue again."""
    case = stuck_case("reo-1")
    esc = case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(case, **WHY))
    assert esc.case.state == "ESCALATED"
    requested = override_request(
        override=Override.RELEASE_CLAIM, **STAFF.on(case, seen_version=esc.case.version, **WHY)
    )
    done = override_approve(
        request_id=requested.case.override.request_id, **SUPER.on(case, seen_version=None, **WHY)
    )
    assert done.case.state == "RESOLVED"
    again = override_request(
        override=Override.REOPEN, **STAFF2.on(case, seen_version=done.case.version, **WHY)
    )
    reopened = override_approve(
        request_id=again.case.override.request_id, **SUPER2.on(case, seen_version=None, **WHY)
    )
    assert reopened.case.state == "OPEN" and reopened.case.queue == "STUCK_PENDING"


SERVICES = {
    "dispose": lambda c, a: case_dispose(
        disposition=Disposition.ESCALATE, **Acting(a).on(c, **WHY)
    ),
    "assign": lambda c, a: case_assign(**Acting(a).on(c)),
    "override_request": lambda c, a: override_request(
        override=Override.RELEASE_CLAIM, **Acting(a).on(c, **WHY)
    ),
    "override_approve": lambda c, a: override_approve(
        request_id=None, **Acting(a).on(c, seen_version=None, **WHY)
    ),
    "override_reject": lambda c, a: override_reject(
        request_id=None, **Acting(a).on(c, seen_version=None, **WHY)
    ),
    "bulk": lambda c, a: cases_bulk(
        case_ids=[c.case_id],
        disposition=Disposition.ESCALATE,
        staff=StaffAction(actor=a, **WHY),
        dry_run=False,
        store_for=lambda _id: AS_SYSTEM.store,
    ),
}
ALLOWED = {
    "finance_staff": {"dispose", "assign", "override_request", "bulk"},
    "supervisor": {
        "dispose",
        "assign",
        "override_request",
        "override_approve",
        "override_reject",
        "bulk",
    },
    "auditor": set(),
}


@pytest.mark.engines("moto")
@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_role_matrix_for_every_case_service(ddb, role, service):
    """Each role × each service: allowed ones pass the role check, others raise NotAllowed
    and change nothing (auditors never change state)."""
    case = stuck_case(f"rm-{role}-{service}")
    if service in ("override_approve", "override_reject"):
        case = override_request(
            override=Override.RELEASE_CLAIM, **acting("requester").on(case, **WHY)
        ).case
    actor = staff_actor(f"{role}-user", role)
    if service in ALLOWED[role]:
        SERVICES[service](case, actor)
        assert repositories().cases.get(case.case_id).version == case.version + 1
    else:
        with pytest.raises(NotAllowed):
            SERVICES[service](case, actor)
        assert repositories().cases.get(case.case_id).version == case.version


@pytest.mark.engines("moto")
def test_system_cannot_approve_and_api_cannot_dispose(ddb):
    """No superuser or setting bypasses four-eyes: system and API actors are refused."""
    from reconciliation.actors import Actor

    case = stuck_case("sys-1")
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY))
    with pytest.raises(NotAllowed):
        override_approve(
            request_id=None, **Acting(system_actor()).on(case, seen_version=None, **WHY)
        )
    with pytest.raises(NotAllowed):
        case_dispose(
            disposition=Disposition.ESCALATE,
            **Acting(Actor(username="api:acme", role=Role.API)).on(
                case, seen_version=requested.case.version, **WHY
            ),
        )


def test_bulk_dry_run_writes_nothing_then_applies_each_case(ddb):
    """Bulk ESCALATE: the dry run previews each case and writes nothing; the real run
    gives a per-case result, each case its own audited event."""
    one, two = stuck_case("bulk-1"), stuck_case("bulk-2")
    preview = cases_bulk(
        case_ids=[one.case_id, two.case_id, "C-NOPE"],
        disposition=Disposition.ESCALATE,
        staff=StaffAction(actor=STAFF.actor, **WHY),
        dry_run=True,
        store_for=lambda _id: AS_SYSTEM.store,
    )
    assert [(r.case_id, r.ok, r.becomes) for r in preview] == [
        (one.case_id, True, "Escalated"),
        (two.case_id, True, "Escalated"),
        ("C-NOPE", False, ""),
    ]
    assert _events(ddb, one.case_id) == ["case_opened"]
    done = cases_bulk(
        case_ids=[one.case_id, two.case_id],
        disposition=Disposition.ESCALATE,
        staff=StaffAction(actor=STAFF.actor, action_id="bulk-a", **WHY),
        dry_run=False,
        store_for=lambda _id: AS_SYSTEM.store,
    )
    assert [r.ok for r in done] == [True, True]
    assert _events(ddb, one.case_id) == ["case_opened", "case_escalated"]
    assert _events(ddb, two.case_id) == ["case_opened", "case_escalated"]
    again = cases_bulk(
        case_ids=[one.case_id],
        disposition=Disposition.ESCALATE,
        staff=StaffAction(actor=STAFF.actor, action_id="bulk-a", **WHY),
        dry_run=False,
        store_for=lambda _id: AS_SYSTEM.store,
    )
    assert again[0].ok is False  # already escalated: not offered again


def test_queue_pages_filters_and_cursor_binding(ddb):
    """Queue pages are oldest first with a cursor; filters narrow them; a cursor from one
    queue or filter set is refused on another, and a forged one is refused."""
    for i in range(5):
        with clock.travel(i):
            stuck_case(f"page-{i}", amount=f"{10 + i}.00", fund="GENERAL" if i % 2 else "BUILD")
    first = queue_page("STUCK_PENDING", limit=2, store=AS_SYSTEM.store)
    assert len(first.rows) == 2 and first.next_cursor
    second = queue_page("STUCK_PENDING", limit=2, cursor=first.next_cursor, store=AS_SYSTEM.store)
    third = queue_page("STUCK_PENDING", limit=2, cursor=second.next_cursor, store=AS_SYSTEM.store)
    ids = [r.case_id for r in first.rows + second.rows + third.rows]
    assert len(set(ids)) == 5
    opened = [r.opened_at for r in first.rows + second.rows + third.rows]
    assert opened == sorted(opened)
    general = queue_page(
        "STUCK_PENDING", filters=QueueFilters(fund="GENERAL"), store=AS_SYSTEM.store
    )
    assert sorted(str(r.amount) for r in general.rows) == ["11", "13"]
    big = queue_page(
        "STUCK_PENDING", filters=QueueFilters(min_amount=Decimal("12.50")), store=AS_SYSTEM.store
    )
    assert sorted(str(r.amount) for r in big.rows) == ["13", "14"]
    with pytest.raises(InvalidFilter):
        queue_page("AMBIGUOUS_TIMEOUT", limit=2, cursor=first.next_cursor, store=AS_SYSTEM.store)
    with pytest.raises(InvalidFilter):
        queue_page(
            "STUCK_PENDING",
            filters=QueueFilters(fund="GENERAL"),
            cursor=first.next_cursor,
            store=AS_SYSTEM.store,
        )
    with pytest.raises(InvalidFilter):
        queue_page("STUCK_PENDING", cursor=first.next_cursor[:-3] + "abc", store=AS_SYSTEM.store)
    assert json.loads(json.dumps(repositories().cases.counts()))["STUCK_PENDING"] == 5


INVISIBLE_REASONS = [
    "\u200b" * 10,  # zero-width spaces
    "\u202e\u202d\u202a\u202b\u202c\u2066\u2067\u2068\u2069\u200e\u200f",  # bidi controls
    "\ufeff\u2060\u00ad\u200c\u200d\u180e\u2061\u2062\u2063\u2064",  # other format (Cf)
    " \u00a0\u3000\u2003\t\u200b\u202e \u2028\u2029\u200b\ufeff\u3164\u2800 ",  # mixed
    "ok" + "\u200b" * 20 + "\u202e",  # two visible characters padded with invisible ones
]


@pytest.mark.parametrize("text", INVISIBLE_REASONS)
def test_invisible_characters_do_not_count_toward_a_reason(ddb, text):
    """A reason of zero-width, bidi, format characters and whitespace is refused for a
    disposition, an override request and a supervisor's decision, with the usual message;
    a short reason padded with them too."""
    case = stuck_case("why-invisible")
    invisible = dict(reason_code="OTHER", reason_text=text)
    with pytest.raises(InvalidReason, match="at least 10 characters"):
        case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(case, **invisible))
    with pytest.raises(InvalidReason, match="at least 10 characters"):
        override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **invisible))
    requested = override_request(override=Override.RELEASE_CLAIM, **STAFF.on(case, **WHY)).case
    for decide in (override_approve, override_reject):
        with pytest.raises(InvalidReason, match="at least 10 characters"):
            decide(
                request_id=requested.override.request_id,
                **SUPER.on(case, seen_version=None, **invisible),
            )
    assert repositories().cases.get(case.case_id).state == "OVERRIDE_REQUESTED"


def test_visible_characters_beside_invisible_ones_make_a_reason(ddb):
    """Ten visible characters are enough whatever invisible ones surround them (accents
    written as combining marks count with their letter)."""
    case = stuck_case("why-visible")
    result = case_dispose(
        disposition=Disposition.ESCALATE,
        **STAFF.on(
            case,
            reason_code="OTHER",
            reason_text="\u200bre\u0301sume\u0301 done\u200b",  # exactly 10 visible
        ),
    )
    assert result.applied


def test_a_retry_inside_the_claims_lease_asks_to_wait_then_commits(ddb, monkeypatch):
    """The commit's answer was lost and nothing applied: the claim is still PENDING inside
    its lease. The retry run says how long to wait (a value, not a string protocol), and
    run again after the lease it commits once."""
    from reconciliation.casework import dispositions
    from reconciliation.casework.retries import RetryOutcome, retry_commit_run
    from tests import fault_helpers
    from tests.reconciliation.factories import submit

    with fault_helpers.injected({"ambiguous_no_commit": 1.0}):
        outcome = submit("rc-wait")
    case = repositories().cases.get(outcome.case_id)
    monkeypatch.setattr(dispositions, "enqueue_retry", lambda case_id, request_id=None: None)
    case_dispose(disposition=Disposition.RETRY_COMMIT, **STAFF.on(case, **WHY))
    waiting = retry_commit_run(case.case_id, store=AS_SYSTEM.store)
    assert waiting.kind == "wait" and 1 <= waiting.wait_s <= 60
    assert pledges(ddb) == []
    with clock.travel(waiting.wait_s + 1):
        assert retry_commit_run(case.case_id, store=AS_SYSTEM.store) == RetryOutcome("committed")
    assert len(pledges(ddb)) == 1
