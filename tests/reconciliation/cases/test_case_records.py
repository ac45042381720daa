"""A case's parts are typed records (reconciliation/cases/models.py), and a stored case
reads into them and writes back byte for byte: the items below are what main wrote
before the records existed (case_to_item of cases built as its writers build them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciliation.cases.models import (
    CaseRequest,
    ClientOutcome,
    CommitRetry,
    Evidence,
    OverrideRequest,
    Requester,
    Resolution,
    case_from_item,
    case_to_item,
    decoded_row,
    retry_in_flight,
)
from reconciliation.cases.vocabulary import (
    CaseState,
    Disposition,
    ErrorKind,
    Override,
    ReasonCode,
    RetryStatus,
)
from reconciliation.dynamo.cancellation import Branch, CancellationCode, DecodedReason
from reconciliation.dynamo.tables import donor_search_key

# Items as main's case_to_item stored them, kept literally in stored_cases.json: one per
# shape its writers make (a stuck case a retry resolved; a cancelled transaction awaiting
# a release; a drift case voided by an approved override; a retry superseded by its own
# case; an open case with a queued retry and a void request; a retry resolved before
# ``asked_by`` and ``finished_at`` were kept). Numbers as DynamoDB returns them (25.00 is
# stored, and read back, as 25).
STORED: dict[str, dict] = json.loads((Path(__file__).parent / "stored_cases.json").read_text())

# What each part of a case is read into.
PARTS = {
    "evidence": Evidence,
    "client_outcome": ClientOutcome,
    "override": OverrideRequest,
    "resolution": Resolution,
    "request": CaseRequest,
    "retry": CommitRetry,
}


def _text(item: dict) -> str:
    return json.dumps(item, sort_keys=True)


@pytest.mark.parametrize("name", sorted(STORED))
def test_a_stored_case_reads_into_records_and_writes_back_byte_for_byte(name):
    """A case item main wrote, read into a Case of typed parts and written again, is the
    same item: same attributes, same JSON text in each part. One attribute is new since
    these items were stored: ``donor_key``, the donor ref folded for the search index
    ``by_donor_key`` (written whenever a case with a donor ref is written)."""
    item = STORED[name]
    rewritten = case_to_item(case_from_item(item))
    if "donor_ref" in item:
        folded = rewritten.pop("donor_key")
        assert folded == {"S": donor_search_key(item["donor_ref"]["S"])}
    assert _text(rewritten) == _text(item)


@pytest.mark.parametrize("name", sorted(STORED))
def test_each_part_round_trips_through_its_record(name):
    """Every stored part, read by its record's from_json and written by to_json, is the
    same JSON text (same keys, absent keys still absent, nulls still null)."""
    item = STORED[name]
    for part, record in PARTS.items():
        if part in item:
            stored = item[part]["S"]
            again = record.from_json(json.loads(stored)).to_json()
            assert json.dumps(again, sort_keys=True, default=str) == stored, part
    rows = json.loads(item["decoded"]["S"])
    again_rows = [DecodedReason.from_json(r).to_json() for r in rows]
    assert json.dumps(again_rows, sort_keys=True, default=str) == item["decoded"]["S"]


def test_the_parts_read_as_records_with_their_codes():
    """A cancelled case awaiting approval reads its request, decoded rows, evidence and
    retry as records, code-valued fields as their enums."""
    case = case_from_item(STORED["cancelled_pending"])
    assert case.override == OverrideRequest(
        request_id="6f1c",
        action=Override.RELEASE_CLAIM,
        requested_by=Requester(username="ana", email="ana@example.org", role="finance_staff"),
        reason_code=ReasonCode.DATA_CORRECTION,
        reason_text="Claim left behind by a dead worker.",
        requested_at="2026-11-30T10:00:00.000Z",
        pinned_version=4,
        expires_at=1764583200,
        prior_state=CaseState.ESCALATED,
        claim_version=2,
    )
    assert case.override.action is Override.RELEASE_CLAIM
    assert case.override.return_state is CaseState.ESCALATED
    assert [(r.code, r.branch, r.failed) for r in case.decoded] == [
        (CancellationCode.CONDITIONAL_CHECK_FAILED, Branch.DUPLICATE, True),
        (CancellationCode.NONE, Branch.NONE, False),
    ]
    assert case.decoded[0].old_item == {
        "amount": "30.5",
        "intent_id": "acme#k-1",
        "status": "RECORDED",
    }
    assert case.evidence.error_code == "TransactionCanceledException"
    assert case.evidence.claim is not None and case.evidence.claim["version"] == 2
    assert case.evidence.inside_token_window is True
    assert case.client_outcome == ClientOutcome(error="idempotency_key_reused")
    assert case.request == CaseRequest(
        donor_ref="D-42", fund="general", amount="25.00", currency="USD"
    )
    assert case.retry is not None and case.retry.finished
    assert not retry_in_flight(case)


def test_a_resolution_and_a_retry_read_their_codes():
    """A retry's resolution reads its disposition and outcome as codes; a queued retry is
    in flight; a drift case's free-form finding is kept as given."""
    retried = case_from_item(STORED["stuck_retried"])
    assert retried.resolution == Resolution(
        disposition=Disposition.RETRY_COMMIT,
        by="system",
        at="2026-11-30T09:30:00.000Z",
        outcome="created",
        asked_by="ana",
    )
    assert retried.client_outcome.error is ErrorKind.WORKER_DIED
    # The sweep's "no pledge" is stored as null: it is kept, and written back, as null.
    assert retried.evidence.pledge_exists is False
    assert retried.evidence.extra == {"pledge": None}
    queued = case_from_item(STORED["queued"])
    assert queued.retry is not None and queued.retry.status is RetryStatus.QUEUED
    assert retry_in_flight(queued)
    assert queued.override is not None and queued.override.pledge_audit_seq == 3
    drift = case_from_item(STORED["drift_resolved"])
    assert drift.resolution is not None
    assert drift.resolution.disposition is Override.VOID_PLEDGE
    assert drift.resolution.requested_by == "ana"
    assert drift.evidence.drift is not None and drift.evidence.drift["difference"] == "1.50"
    assert not drift.request and not drift.client_outcome and drift.decoded == ()


def test_an_index_row_reads_its_parts_as_records():
    """A queue or resolved-list row (decoded_row) carries the same records as the case."""
    row = decoded_row(STORED["superseded"])
    assert isinstance(row["resolution"], Resolution)
    assert row["resolution"].superseded_by == "C-EEEEEEEEEEEEEEEE"
    assert isinstance(row["retry"], CommitRetry)
    assert row["retry"].request_id == "r-4"


def test_an_old_item_missing_keys_reads_with_the_defaults_readers_assume():
    """A case written before its parts existed, and an override request without the keys
    added later, reads with the defaults: no decoded rows, empty evidence, outcome and
    request, no retry; the request returns to OPEN and never expires."""
    item = {k: v for k, v in STORED["queued"].items() if k not in ("decoded", *PARTS)}
    bare_override = {
        "request_id": "7a2d",
        "action": "REOPEN",
        "requested_by": {"username": "ana"},
        "pinned_version": 5,
    }
    item["override"] = {"S": json.dumps(bare_override, sort_keys=True)}
    case = case_from_item(item)
    assert case.decoded == ()
    assert case.evidence == Evidence() and not case.evidence
    assert case.client_outcome == ClientOutcome() and case.client_outcome.error is None
    assert case.request == CaseRequest() and not case.request
    assert case.retry is None and case.resolution is None
    assert not retry_in_flight(case)
    override = case.override
    assert override is not None
    assert override.requested_by == Requester(username="ana")
    assert override.return_state is CaseState.OPEN
    assert override.expires_at is None and not override.expired(2_000_000_000)
    assert override.claim_version is None and override.pledge_audit_seq is None
    assert "expires_at" not in override.to_json()
