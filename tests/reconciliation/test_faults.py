"""Fault injection: parsing, and honoured only in debug or with the explicit opt-in."""

from __future__ import annotations

import pytest

from reconciliation.dynamo import faults


def test_parse_accepts_names_and_aliases():
    """Full names and the simulator's short aliases parse to probabilities."""
    assert faults.parse_faults("ambiguous=0.03, throttle=0.05,crash=0.01") == {
        "ambiguous_after_commit": 0.03,
        "throttle": 0.05,
        "crash_after_claim": 0.01,
    }


@pytest.mark.parametrize(
    "spec,message",
    [
        ("explode=0.1", "unknown fault"),
        ("throttle=2", "between 0 and 1"),
        ("throttle=x", "not a number"),
    ],
)
def test_parse_rejects_bad_specs_clearly(spec, message):
    """Unknown names and bad probabilities are refused with a message naming the problem."""
    with pytest.raises(ValueError, match=message):
        faults.parse_faults(spec)


def test_fault_injection_is_ignored_without_debug_or_opt_in(settings, caplog):
    """FAULT_INJECTION set on a production configuration does nothing, and says so."""
    faults.set_plan(None)
    settings.FAULT_INJECTION = "crash_after_claim=1"
    settings.ALLOW_FAULT_INJECTION = False
    assert faults.active_plan() is None
    faults.crash_after_claim()  # does not raise
    assert "ignored" in caplog.text


def test_fault_injection_is_honoured_with_opt_in(settings):
    """With ALLOW_FAULT_INJECTION the plan is active and fires."""
    settings.FAULT_INJECTION = "crash_after_claim=1"
    settings.ALLOW_FAULT_INJECTION = True
    try:
        with pytest.raises(faults.SimulatedCrash):
            faults.crash_after_claim()
    finally:
        settings.FAULT_INJECTION = ""
        faults.active_plan()


def test_slow_task_sleeps_only_when_honoured(settings, monkeypatch):
    """``slow_task`` holds a task up only when fault injection is allowed and asks for it."""
    slept: list[float] = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    settings.FAULT_INJECTION = "slow_task=1"
    settings.ALLOW_FAULT_INJECTION = False
    faults.slow_task("retry_commit_task")
    assert slept == []
    settings.ALLOW_FAULT_INJECTION = True
    try:
        faults.slow_task("retry_commit_task")
    finally:
        settings.FAULT_INJECTION = ""
        faults.active_plan()
    assert slept == [faults.SLOW_TASK_S]
