"""``explore_faults --actors 2``: the scheduler's enumeration under the pre-emption bound,
each many-hands invariant broken on purpose, a bounded run over the pairs that carried the
known defects, and those defects brought back by mutation and caught."""

from __future__ import annotations

import contextlib
import dataclasses
import io

import pytest
from django.core.management import call_command

from reconciliation.audit.models import AuditAction
from reconciliation.cases.models import CaseRequest, Resolution
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.simulation.explorer.catalogue import catalogue, pairs
from reconciliation.simulation.explorer.hands_search import HandsConfig, explore_hands
from reconciliation.simulation.explorer.schedule import (
    Child,
    Decision,
    children,
    level_quotas,
    marked_children,
    preemptions,
    sample_level,
)
from reconciliation.simulation.hands_invariants import (
    ClientAnswer,
    answered_problems,
    decision_problems,
    last_answer_problems,
    late_case_problems,
    region_problems,
    resolution_evidence_problems,
    resolution_problems,
)

REQUEST = {"donor_ref": "XF-0001", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}
PLEDGE = {"intent_id": "t#k", "status": "RECORDED", **REQUEST, "amount": "25"}
CONFIRMED = {"disposition": "CONFIRMED_COMMITTED", "by": "system", "at": "t1"}
RETRIED = {"disposition": "RETRY_COMMIT", "by": "system", "at": "t2"}


# --- the scheduler --------------------------------------------------------------------------


def _run(*steps: tuple[tuple[str, ...], str | None, str]) -> list[Decision]:
    return [Decision(enabled, current, chosen) for enabled, current, chosen in steps]


def test_a_switch_away_from_an_actor_that_could_go_on_is_a_preemption():
    """Choosing at the start or after an actor ended is free; leaving a runnable one is not."""
    decisions = _run(
        (("a", "b"), None, "a"),  # the start: free
        (("a", "b"), "a", "b"),  # a could go on: a pre-emption
        (("a",), None, "a"),  # b ended: free
    )
    assert preemptions(decisions) == 1


def test_children_stay_within_the_bound_and_after_the_prefix():
    """Every child differs at one choice after the prefix, and none exceeds the bound."""
    decisions = _run(
        (("a", "b"), None, "a"),
        (("a", "b"), "a", "b"),
        (("a", "b"), "b", "a"),
        (("a", "b"), "a", "a"),
    )
    assert preemptions(decisions) == 2
    kids = children(decisions, prefix_length=1, bound=2)
    assert all(cost <= 2 for cost, _ in kids)
    assert all(len(prefix) >= 2 for _, prefix in kids)
    # Switching back at step 2 keeps b running: one pre-emption; step 3 would make three.
    assert (1, ("a", "b", "b")) in kids
    assert not any(prefix[:3] == ("a", "b", "a") and len(prefix) == 4 for _, prefix in kids)


def test_a_capped_pair_is_shared_over_every_preemption_count():
    """Two serial schedules, then the rest evenly over one and two pre-emptions."""
    assert level_quotas(6) == [2, 2, 2]
    assert level_quotas(4) == [2, 1, 1]
    assert level_quotas(5) == [2, 2, 1]
    assert level_quotas(1) == [1, 0, 0]
    assert level_quotas(6, bound=0) == [2]


def test_preemptions_in_a_read_write_window_come_first_in_a_seeded_order():
    """A switch away from an actor paused before a write, or before the read just before
    its write, is marked; a level's sample takes those first, the same for the same seed."""
    import random

    decisions = [
        Decision(("a", "b"), None, "a"),
        Decision(("a", "b"), "a", "a"),  # a paused before a read
        Decision(("a", "b"), "a", "a"),  # before the read that precedes its write
        Decision(("a", "b"), "a", "a", before_write=True),
        Decision(("b",), None, "b"),
    ]
    kids = marked_children(decisions, prefix_length=1)
    windows = {c.prefix for c in kids if c.in_window}
    assert windows == {("a", "a", "b"), ("a", "a", "a", "b")}
    first = sample_level(kids, random.Random(7))
    assert {c.prefix for c in first[:2]} == windows
    assert first == sample_level(list(reversed(kids)), random.Random(7))
    assert Child(1, ("a", "b")) in first


def test_the_catalogue_has_every_hand_and_pairs_agree_on_their_prelude():
    """Workers, client, sweep, re-check, two RETRY_COMMIT deliveries, each staff action the
    case page offers, approve, reject, expiry, backfill; the original worker (inside its
    lease) never meets a hand that needs the lease run out."""
    names = [spec.name for spec in catalogue()]
    for name in ("original", "late", "client", "sweep", "recheck", "retry", "retry2"):
        assert name in names
    assert {"approve", "reject", "expire", "backfill", "asked-retry"} <= set(names)
    assert {"staff:RETRY_COMMIT", "staff:RELEASE_CLAIM", "staff:ESCALATE"} <= set(names)
    found = {(a.name, b.name) for a, b in pairs(catalogue())}
    assert ("retry", "retry2") in found and ("original", "client") in found
    assert ("original", "late") not in found


# --- each invariant, broken on purpose -------------------------------------------------------


def _event(seq: int, action: str, before: dict, after: dict, **extra) -> dict:
    return {"stream": "CASE#C-1", "seq": seq, "action": action, "before": before, "after": after}


def test_a_case_resolved_twice_in_one_opening_is_reported():
    """Invariant a: a second resolution written over the first, without a reopen."""
    streams = {
        "CASE#C-1": [
            _event(1, AuditAction.CASE_OPENED, {}, {"state": "OPEN"}),
            _event(2, "x", {"state": "OPEN"}, {"state": "RESOLVED", "resolution": CONFIRMED}),
            _event(
                3,
                "y",
                {"state": "RESOLVED", "resolution": CONFIRMED},
                {"state": "RESOLVED", "resolution": RETRIED},
            ),
        ]
    }
    problems = resolution_problems(streams)
    assert any("replaced the resolution" in p.detail for p in problems), problems
    assert any("resolved 2 times in opening 1" in p.detail for p in problems), problems


def test_a_resolution_after_an_audited_reopen_is_allowed_and_leaving_resolved_is_not():
    """Invariant a: an approved REOPEN starts a new opening; any other way out of RESOLVED
    is reported."""
    reopened = {
        "CASE#C-1": [
            _event(1, "x", {"state": "OPEN"}, {"state": "RESOLVED", "resolution": CONFIRMED}),
            {
                **_event(
                    2,
                    AuditAction.OVERRIDE_REQUESTED,
                    {"state": "RESOLVED", "resolution": CONFIRMED},
                    {"state": "OVERRIDE_REQUESTED", "resolution": CONFIRMED},
                ),
                "disposition": "REOPEN",
            },
            {
                **_event(
                    3,
                    AuditAction.OVERRIDE_APPROVED,
                    {"state": "OVERRIDE_REQUESTED", "resolution": CONFIRMED},
                    {"state": "OPEN"},
                ),
                "disposition": "REOPEN",
            },
            _event(4, "x", {"state": "OPEN"}, {"state": "RESOLVED", "resolution": RETRIED}),
        ]
    }
    assert resolution_problems(reopened) == []
    escaped = {
        "CASE#C-1": [
            _event(1, "x", {"state": "OPEN"}, {"state": "RESOLVED", "resolution": CONFIRMED}),
            _event(2, AuditAction.CASE_ESCALATED, {"state": "RESOLVED"}, {"state": "ESCALATED"}),
        ]
    }
    assert any("left RESOLVED" in p.detail for p in resolution_problems(escaped))


def test_a_four_eyes_decision_taken_twice_is_reported():
    """Invariant b: a request approved, then expired, is decided twice."""
    request = {"request": {"request_id": "R-1", "action": "RELEASE_CLAIM"}}
    streams = {
        "CASE#C-1": [
            {**_event(1, AuditAction.OVERRIDE_APPROVED, {}, {}), "detail": request},
            {**_event(2, AuditAction.OVERRIDE_EXPIRED, {}, {}), "detail": request},
        ]
    }
    problems = decision_problems(streams)
    assert [p.invariant for p in problems] == ["b a four-eyes decision stands"], problems
    assert "R-1 decided 2 times" in problems[0].detail


def test_an_open_case_that_its_evidence_answers_is_reported():
    """Invariant c: an OPEN case about an intent recorded with the case's own request; and a
    case opened by a hand whose commit met the pledge. Case rows as decoded_row reads them."""
    case = {"case_id": "C-1", "case_type": "CANCELLED_TRANSACTION", "state": "OPEN"}
    case |= {"intent_id": "t#k", "request": CaseRequest.from_json(REQUEST)}
    assert answered_problems([case], [PLEDGE])
    assert answered_problems([{**case, "state": "RESOLVED"}], [PLEDGE]) == []
    other = {**case, "request": CaseRequest.from_json({**REQUEST, "amount": "30.00"})}
    assert answered_problems([other], [PLEDGE]) == []
    assert late_case_problems([("C-1", "CANCELLED_TRANSACTION")])


def test_an_intent_recorded_in_two_regions_is_reported():
    """Invariant d, over every configured region."""
    assert region_problems({"us-east-1": ["t#k"], "eu-west-1": []}) == []
    problems = region_problems({"us-east-1": ["t#k"], "eu-west-1": ["t#k"]})
    assert problems and "2 regions" in problems[0].detail


def test_an_untruthful_last_answer_is_reported():
    """Invariant e: success without a pledge; a definite failure after a commit applied."""
    assert last_answer_problems([ClientAnswer("client", OutcomeKind.CREATED)], pledge_exists=False)
    lie = ClientAnswer("late", OutcomeKind.CONFLICT, commit_applied=True)
    assert last_answer_problems(
        [ClientAnswer("client", OutcomeKind.CREATED), lie], pledge_exists=True
    )
    unknown = ClientAnswer("late", OutcomeKind.OUTCOME_UNKNOWN, commit_maybe=True)
    assert last_answer_problems([unknown], pledge_exists=False) == []


def test_a_resolution_that_contradicts_its_evidence_is_reported():
    """Invariant f: confirmed committed without a pledge; voided with the pledge RECORDED.
    Case rows as decoded_row reads them."""
    confirmed = {"case_id": "C-1", "intent_id": "t#k", "state": "RESOLVED"}
    resolved = {**confirmed, "resolution": Resolution.from_json(CONFIRMED)}
    assert resolution_evidence_problems([resolved], [])
    voided = {**confirmed, "resolution": Resolution.from_json({"disposition": "VOID_PLEDGE"})}
    assert resolution_evidence_problems([voided], [PLEDGE])
    assert resolution_evidence_problems([resolved], [PLEDGE]) == []


# --- bounded runs on DynamoDB Local ---------------------------------------------------------

# The pairs that carried the known defects: two RETRY_COMMIT deliveries at once; a retry
# against the sweep's auto-resolution; a supervisor approving RELEASE_CLAIM while a retry
# is asked and a finished one redelivered; the late worker against the client's retry
# after the sweep's case; a person's disposition against the late worker's commit
# (evidence changing under the page). approve×expire runs in its mutation test below; the
# others (retry×approve, the refusal; late×staff:RELEASE_CLAIM) in make test-reliability.
DEFECT_PAIRS = (
    "retry,retry2",
    "retry,sweep",
    "asked-retry,approve",
    "late,client",
    "late,staff:CONFIRMED_COMMITTED",
)


def _explore(
    endpoint_url: str,
    pairs_: tuple[str, ...],
    per_pair: int,
    faults: bool = False,
    first_violation: bool = False,
):
    config = HandsConfig(
        pairs=pairs_,
        per_pair=per_pair,
        faults=faults,
        endpoint_url=endpoint_url,
        first_violation=first_violation,
    )
    return explore_hands(config)


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
def test_the_defect_pairs_find_no_violation(dynamodb_local, capsys):
    """Each pair that once carried a defect, capped at 4 schedules: both serial ones, one
    with one pre-emption and one with two (seeded, read-write windows first): no
    violation on this code, and the bound is reached."""
    exploration = _explore(dynamodb_local.endpoint_url, DEFECT_PAIRS, per_pair=4)
    lines = exploration.lines()
    with capsys.disabled():
        print(f"\n{lines[-3]}\n{lines[-2]}\n{lines[-1]}")
    assert lines[-1] == f"explore_faults: {len(exploration.results)} schedules, 0 violations", (
        "\n".join(lines)
    )
    assert exploration.pairs == len(DEFECT_PAIRS)
    assert exploration.by_preemptions() == {
        0: 2 * len(DEFECT_PAIRS),
        1: len(DEFECT_PAIRS),
        2: len(DEFECT_PAIRS),
    }


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
def test_faults_at_the_writes_of_the_hands_find_no_violation(dynamodb_local):
    """Depth-1 faults (a write applied and its answer lost, throttling, a conflict, a
    crash) at a seeded two of the writes of two RETRY_COMMIT deliveries' serial runs."""
    exploration = _explore(dynamodb_local.endpoint_url, ("retry,retry2",), 6, faults=True)
    assert sum(1 for r in exploration.results if r.fault) == 2
    assert not exploration.violations, "\n".join(exploration.lines())


# Mutation runs: 10 schedules a pair (2 serial, 4 with one pre-emption, 4 with two),
# ending at the first violation; the level of one pre-emption holds every read-write
# window of these pairs' serial schedules (retry×sweep has four), so each defect's
# interleaving is among them whatever the seed.
MUTANT_BUDGET = 10


def _unconditional(module, monkeypatch) -> None:
    """Mutation: ``module``'s case writes no longer compare-and-set on what its decider
    read: each re-reads the case just before writing and writes over whatever it finds,
    and a resolution no longer stands."""
    from reconciliation.cases import changes
    from reconciliation.cases.repository import CaseRepository

    real = changes.case_commit_change

    def last_writer_wins(store, case, updated, event):
        current = CaseRepository(store).get(case.case_id) or case
        return real(
            store, current, dataclasses.replace(updated, version=current.version + 1), event
        )

    monkeypatch.setattr(changes, "_resolution_stands", lambda read, updated: None)
    monkeypatch.setattr(module, "case_commit_change", last_writer_wins)


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
@pytest.mark.parametrize("pair", ["retry,retry2", "retry,sweep"])
def test_a_retry_result_written_without_its_version_condition_is_caught(
    dynamodb_local, monkeypatch, pair
):
    """RETRY_COMMIT's result write made unconditional (its version condition dropped): two
    deliveries at once, or a retry racing the sweep's re-check, resolve the case twice. The
    explorer must report it, or it would not notice that condition going missing."""
    from reconciliation.casework import retries

    _unconditional(retries, monkeypatch)
    exploration = _explore(
        dynamodb_local.endpoint_url, (pair,), per_pair=MUTANT_BUDGET, first_violation=True
    )
    lines = exploration.lines()
    assert exploration.violations, "\n".join(lines)
    assert any("a resolved once per opening" in line for line in lines), "\n".join(lines)
    assert lines[-1] != f"explore_faults: {len(exploration.results)} schedules, 0 violations"


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
def test_an_override_decision_written_without_its_version_condition_is_caught(
    dynamodb_local, monkeypatch
):
    """The supervisor's approval and the expiry made unconditional: the request is
    approved and expired both (a four-eyes decision that does not stand)."""
    from reconciliation.casework import overrides

    _unconditional(overrides, monkeypatch)
    exploration = _explore(
        dynamodb_local.endpoint_url,
        ("approve,expire",),
        per_pair=MUTANT_BUDGET,
        first_violation=True,
    )
    assert exploration.violations, "\n".join(exploration.lines())
    assert "b a four-eyes decision stands" in str(exploration.violations[0].problems)


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
def test_a_retry_that_runs_beside_a_pending_release_is_caught(dynamodb_local, monkeypatch):
    """A retry beside a pending release, brought back: RETRY_COMMIT runs whatever the case's
    state and however its request ended (``retry_due`` reduced to "the case has a retry"),
    and writes its result unconditionally. A finished retry redelivered while a supervisor
    approves RELEASE_CLAIM replaces the four-eyes resolution with its own."""
    from reconciliation.casework import retries

    _unconditional(retries, monkeypatch)
    monkeypatch.setattr(retries, "retry_due", lambda case, request_id: bool(case and case.retry))
    exploration = _explore(
        dynamodb_local.endpoint_url,
        ("asked-retry,approve",),
        per_pair=MUTANT_BUDGET,
        first_violation=True,
    )
    assert exploration.violations, "\n".join(exploration.lines())
    found = str(exploration.violations[0].problems)
    assert "replaced the resolution RELEASE_CLAIM by hands-supervisor" in found, found


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
def test_a_disposition_written_without_its_version_condition_is_caught(dynamodb_local, monkeypatch):
    """A person's disposition made unconditional: staff escalating a case that the retry
    resolved meanwhile moves it out of RESOLVED without a reopen."""
    from reconciliation.casework import dispositions

    _unconditional(dispositions, monkeypatch)
    exploration = _explore(
        dynamodb_local.endpoint_url,
        ("retry,staff:ESCALATE",),
        per_pair=MUTANT_BUDGET,
        first_violation=True,
    )
    assert exploration.violations, "\n".join(exploration.lines())


@pytest.mark.dynamodb_local_only
@pytest.mark.timeout(300)
def test_the_command_prints_schedules_and_violations_last(dynamodb_local, settings):
    """``manage.py explore_faults --actors 2``: the last line counts schedules."""
    settings.DYNAMODB_ENDPOINT_URL = dynamodb_local.endpoint_url
    out = io.StringIO()
    with contextlib.suppress(SystemExit):
        call_command(
            "explore_faults",
            "--actors",
            "2",
            "--pairs",
            "retry,recheck",
            "--per-pair",
            "3",
            "--no-faults",
            stdout=out,
        )
    lines = out.getvalue().splitlines()
    assert lines[-1] == "explore_faults: 3 schedules, 0 violations", lines
