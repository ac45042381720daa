"""with_retry runs the first attempt outside tenacity's loop; a transient failure enters
the loop as its first outcome, with the same waits, counts and time budget as before."""

from __future__ import annotations

import random
import time

import pytest
from botocore.exceptions import ClientError

from reconciliation import metrics
from reconciliation.dynamo import retry
from reconciliation.dynamo.retry import RetriesExhausted, with_retry


def _throttled() -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException"}}, "PutItem")


class _Largest:
    """A stand-in rng whose full-jitter wait is always the largest allowed."""

    def uniform(self, _low: float, high: float) -> float:
        return high


def test_an_answer_at_once_builds_no_retry_loop(monkeypatch):
    """A call that answers is made once, and neither tenacity's loop nor a Random is
    built for it."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the retry loop was built for a call that answered")

    monkeypatch.setattr(retry, "Retrying", refuse)
    monkeypatch.setattr(retry.random, "Random", refuse)
    calls = []
    assert with_retry(lambda: calls.append(1) or "done") == "done"
    assert calls == [1]


def test_a_transient_first_failure_is_retried_with_the_usual_wait(settings):
    """Throttled once, then answered: two calls, one retry counted, and the one wait is
    the first wait of full jitter drawn from the same rng."""
    settings.DDB_APP_RETRY_BASE_S, settings.DDB_APP_RETRY_CAP_S = 0.05, 1.0
    outcomes = [_throttled(), "done"]
    calls, waits = [], []

    def call():
        calls.append(1)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    before = metrics.APP_RETRIES.labels("ThrottlingException")._value.get()
    result = with_retry(call, attempts=4, budget_s=60, sleep=waits.append, rng=random.Random(3))
    assert result == "done" and len(calls) == 2
    assert waits == [random.Random(3).uniform(0, 0.05)]
    assert metrics.APP_RETRIES.labels("ThrottlingException")._value.get() == before + 1


def test_the_budget_counts_from_the_first_attempt(settings, monkeypatch):
    """A first attempt that took 0.2 s of a 0.25 s budget leaves no room for a 0.1 s wait:
    the caller hears RetriesExhausted after that one attempt, not a second call."""
    settings.DDB_APP_RETRY_BASE_S, settings.DDB_APP_RETRY_CAP_S = 0.1, 1.0
    calls = []
    # The monotonic clock the budget is measured on, advanced by the call itself: the
    # attempt takes exactly 0.2 s whatever the machine's load.
    now = [time.monotonic()]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    def slow_throttled():
        calls.append(1)
        now[0] += 0.2
        raise _throttled()

    with pytest.raises(RetriesExhausted) as raised:
        with_retry(slow_throttled, attempts=4, budget_s=0.25, sleep=lambda s: None, rng=_Largest())
    assert len(calls) == 1 and raised.value.attempts == 1
