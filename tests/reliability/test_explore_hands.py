"""``explore_faults --actors 2`` in ``make test-reliability``: every pair of the catalogue,
interleaved within two pre-emptions, with a fault at each write of the serial schedules,
capped per pair so the stage stays inside CI's budget (the uncapped run is a manual
command: docs/reliability.md)."""

from __future__ import annotations

import contextlib
import io
import time

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.reliability, pytest.mark.dynamodb_local_only]


@pytest.mark.timeout(1800)
def test_two_hands_find_no_violation(dynamodb_local, settings, record):
    """Every pair, 9 schedules each: both serial ones, a seeded two with one pre-emption
    and two with two, and three with a fault; a pair of an acknowledgement hand
    (dispatch, dispatch2, approve-void) 4: both serial ones, one with one pre-emption and
    one with a fault (at a send, a write or a read). At least 200 schedules, some at the
    bound: the last line counts them and none violates."""
    settings.DYNAMODB_ENDPOINT_URL = dynamodb_local.endpoint_url
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.suppress(SystemExit):  # exit status 1 on a violation; the lines tell
        call_command(
            "explore_faults",
            "--actors",
            "2",
            "--per-pair",
            "9",
            "--per-pair-acks",
            "4",
            stdout=out,
        )
    lines = out.getvalue().splitlines()
    seconds = time.monotonic() - started
    schedules = int(lines[-1].split()[1])
    by_level = next(line for line in lines if line.startswith("by pre-emptions: "))
    record(
        "explore_faults_actors2",
        {"schedules": schedules, "seconds": round(seconds), "distribution": by_level},
    )
    print("\n".join(lines[-3:]), f"({seconds:.0f} s)")
    assert lines[-1] == f"explore_faults: {schedules} schedules, 0 violations", "\n".join(lines)
    assert schedules >= 200
    assert "2: 0;" not in by_level, by_level  # the bound is reached
