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
    """Every pair, up to 6 schedules each (fewest pre-emptions first, half of them with a
    fault), at least 200 schedules: the last line counts them and none violates."""
    settings.DYNAMODB_ENDPOINT_URL = dynamodb_local.endpoint_url
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.suppress(SystemExit):  # exit status 1 on a violation; the lines tell
        call_command("explore_faults", "--actors", "2", "--per-pair", "6", stdout=out)
    lines = out.getvalue().splitlines()
    seconds = time.monotonic() - started
    schedules = int(lines[-1].split()[1])
    record("explore_faults_actors2", {"schedules": schedules, "seconds": round(seconds)})
    assert lines[-1] == f"explore_faults: {schedules} schedules, 0 violations", "\n".join(lines)
    assert schedules >= 200
