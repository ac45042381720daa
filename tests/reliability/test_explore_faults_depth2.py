"""The fault explorer at depth 2 (``make test-reliability``): every pair of faults within one
request or task run, and a request's fault paired with every write of the life's later
requests and task runs, on DynamoDB Local, in two workers."""

from __future__ import annotations

import contextlib
import io
import time

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.reliability, pytest.mark.dynamodb_local_only]


def _explore(*args: str) -> tuple[list[str], float]:
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.suppress(SystemExit):  # exit status 1 on a violation; the lines tell
        call_command("explore_faults", "--depth", "2", "--workers", "2", *args, stdout=out)
    return out.getvalue().splitlines(), time.monotonic() - started


@pytest.mark.timeout(3600)
def test_depth_two_finds_no_violation(dynamodb_local, settings, record):
    """Every second fault after every first one: the last line counts the scenarios and
    none violates an invariant (the violations' repro lines are the failure message)."""
    settings.DYNAMODB_ENDPOINT_URL = dynamodb_local.endpoint_url
    lines, seconds = _explore()
    scenarios = int(lines[-1].split()[1])
    record("explore_faults_depth2", {"scenarios": scenarios, "seconds": round(seconds)})
    repros = [line for line in lines if line.startswith("explore_faults --only")]
    assert lines[-1] == f"explore_faults: {scenarios} scenarios, 0 violations", "\n".join(repros)
    assert scenarios > 500
