"""Every DynamoDB error the write path logs (claim, commit, case opening) carries the
code DynamoDB or the connection answered as the structured field ``dynamo_error_code``,
so a log search finds every line of one code as ``dynamo_errors_total{code}`` counts
them."""

from __future__ import annotations

import logging

import pytest

from reconciliation.claims.outcomes import OutcomeKind
from tests import fault_helpers
from tests.reconciliation.factories import submit


@pytest.fixture
def quick_retries(settings):
    settings.DDB_APP_RETRY_BASE_S = 0.001
    settings.DDB_APP_RETRY_CAP_S = 0.002


def _logged(caplog) -> list[logging.LogRecord]:
    """The write path's warnings and errors (the claims package's loggers)."""
    return [
        r
        for r in caplog.records
        if r.name.startswith("reconciliation.claims") and r.levelno >= logging.WARNING
    ]


# Faults answered at the HTTP layer: DynamoDB Local (moto applies the request anyway).
@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize(
    "fault,kind,code",
    [
        ("throttle", OutcomeKind.THROTTLED, "ThrottlingException"),
        ("access_denied", OutcomeKind.UNAVAILABLE, "AccessDeniedException"),
        ("cancelled_throttled", OutcomeKind.THROTTLED, "TransactionCanceledException"),
    ],
)
def test_a_refused_request_is_logged_with_its_dynamo_error_code(
    ddb, caplog, quick_retries, fault, kind, code
):
    """A claim or commit refused by DynamoDB past the retry budget logs a line whose
    ``dynamo_error_code`` is the code DynamoDB answered."""
    caplog.set_level(logging.WARNING, logger="reconciliation")
    with fault_helpers.injected({fault: 1.0}):
        assert submit(f"log-{fault}").kind == kind
    records = _logged(caplog)
    assert records, "nothing logged"
    assert [getattr(r, "dynamo_error_code", None) for r in records] == [code] * len(records)


def test_an_unclear_commit_and_a_case_that_cannot_open_are_logged_with_their_codes(
    ddb, caplog, quick_retries
):
    """The commit's answer is lost (a read timeout after it applied) and the case's writes
    are throttled: the outcome-unknown line carries ``ReadTimeoutError``, the line saying
    the case could not be opened ``ThrottlingException``; every write-path line has one."""
    caplog.set_level(logging.INFO, logger="reconciliation")
    with fault_helpers.injected({"ambiguous_after_commit": 1.0, "case_write_fails": 1.0}):
        assert submit("log-unclear").kind == OutcomeKind.OUTCOME_UNKNOWN
    by_message = {r.getMessage().split(":")[0]: r for r in _logged(caplog)}
    unknown = next(r for m, r in by_message.items() if m.startswith("commit outcome unknown"))
    assert unknown.dynamo_error_code == "ReadTimeoutError"
    case = by_message["could not open AMBIGUOUS_TIMEOUT case"]
    assert case.dynamo_error_code == "ThrottlingException"
    assert all(hasattr(r, "dynamo_error_code") for r in _logged(caplog))
