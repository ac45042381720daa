"""Every management command refuses a number that is not finite or not sensible with one
line (``CommandError``; from a shell, argparse's usage error), never a traceback, and
never takes it: ``float()`` reads ``nan``, ``inf`` and ``1e309``, and a NaN rate passed the
old ``rate <= 0`` check and switched the tenant's intake limit off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

ROOT = Path(__file__).resolve().parent.parent

NOT_SENSIBLE = ["nan", "inf", "-inf", "1e309", "9" * 30, "-" + "9" * 30]

# (command, the other arguments it needs, the numeric option under test)
NUMERIC_OPTIONS = [
    ("set_intake_limit", ["--tenant", "acme", "--burst", "5"], "--rate"),
    ("set_intake_limit", ["--tenant", "acme", "--rate", "5"], "--burst"),
    ("issue_api_token", ["--tenant", "acme"], "--expires-in"),
    ("dynamodb_local", [], "--port"),
    ("replicate_regions", [], "--poll-ms"),
    ("simulate", [], "--pledges"),
    ("simulate", ["--pledges", "1"], "--seed"),
    ("simulate", ["--pledges", "1"], "--threads"),
    ("simulate", ["--pledges", "1"], "--peak-rps"),
    ("explore_faults", [], "--seed"),
    ("explore_faults", [], "--bound"),
    ("explore_faults", [], "--per-pair"),
    ("explore_faults", [], "--per-pair-acks"),
    ("explore_faults", [], "--max-schedules"),
    ("explore_faults", [], "--sample"),
    ("explore_faults", [], "--workers"),
    ("explore_faults", [], "--depth"),
    ("explore_faults", [], "--actors"),
    ("verify_audit", [], "--threads"),
    ("webhook_sink", [], "--port"),
    ("webhook_sink", ["--port", "0"], "--misbehave-count"),
    ("webhook_sink", ["--port", "0"], "--delay"),
    ("webhook_sink", ["--port", "0"], "--fail-rate"),
    ("webhook_sink", ["--port", "0"], "--timeout-after-processing-rate"),
    ("webhook_sink", ["--port", "0"], "--timeout-before-processing-rate"),
    ("webhook_sink", ["--port", "0"], "--seed"),
    ("seed_demo", [], "--pledges"),
    ("simulate", ["--pledges", "1"], "--rate"),
    ("add_webhook", ["--tenant", "acme", "https://crm.example.org/h"], "--max-in-flight"),
    ("add_webhook", ["--tenant", "acme", "https://crm.example.org/h"], "--rate"),
]


def our_commands() -> dict[str, str]:
    ours = ("dashboard.accounts", "dashboard.tenancy", "reconciliation")
    return {name: app for name, app in get_commands().items() if app in ours}


def parse_only(name: str):
    """The command with its work replaced: whatever parses is not run (a number let
    through must not start an engine, a server or an exploration)."""
    command = load_command_class(our_commands()[name], name)

    def accepted(*args, **options):
        raise AssertionError(f"{name} accepted {options}")

    command.handle = accepted
    return command


@pytest.mark.parametrize("value", NOT_SENSIBLE)
@pytest.mark.parametrize(("name", "given", "option"), NUMERIC_OPTIONS)
def test_every_numeric_option_refuses_non_finite_and_absurd_numbers(name, given, option, value):
    """nan, ±inf, 1e309 and a 30-digit number are refused as the arguments are read, with
    one line naming the option."""
    with pytest.raises(CommandError) as refused:
        call_command(parse_only(name), *given, f"{option}={value}")
    message = str(refused.value)
    assert option in message and "\n" not in message, message


def test_every_numeric_option_of_every_command_has_a_range():
    """A survey of the project's commands: no option reads a bare ``int`` or ``float``
    (a list of choices bounds one already), so none is left out of the table above."""
    unbounded = []
    covered = {(name, option) for name, _given, option in NUMERIC_OPTIONS}
    for name, app in sorted(our_commands().items()):
        parser = load_command_class(app, name).create_parser("manage.py", name)
        for action in parser._actions:
            option = max(action.option_strings, key=len, default=action.dest)
            if action.type in (int, float) and not action.choices:
                unbounded.append(f"{name} {option}")
            elif action.type is not None and action.type.__qualname__.startswith(
                ("finite_number", "whole_number")
            ):
                assert (name, option) in covered, f"{name} {option} is not tested"
    assert unbounded == []


@pytest.mark.django_db
def test_a_nan_rate_leaves_the_tenants_limit_as_it_was(ddb):
    """The case that switched a limit off: ``--rate nan`` is refused, nothing is saved."""
    from dashboard.tenancy.models import Tenant

    tenant = Tenant.objects.create(name="acme", intake_rate_per_s=5.0, intake_burst=10)
    with pytest.raises(CommandError, match="--rate"):
        call_command("set_intake_limit", "--tenant", "acme", "--rate", "nan", "--burst", "5")
    tenant.refresh_from_db()
    assert (tenant.intake_rate_per_s, tenant.intake_burst) == (5.0, 10)


@pytest.mark.parametrize("lag", ["9" * 30, "1-" + "9" * 20, "3600001", "nan", "1e309"])
def test_replicate_regions_refuses_a_lag_past_an_hour(lag):
    """``--lag-ms`` (N or LOW-HIGH, read by the command): a lag past an hour is refused
    with the lag's own message before anything starts."""
    with pytest.raises(CommandError, match="lag"):
        call_command("replicate_regions", "--lag-ms", lag)


@pytest.mark.parametrize("amount", ["nan", "inf", "1e309", "9" * 40])
@pytest.mark.django_db
def test_add_fund_refuses_a_non_finite_or_absurd_largest_amount(ddb, amount):
    """``--max-amount`` is a decimal amount, read by the fund's own parser: the same
    numbers are one-line refusals and nothing is registered."""
    from dashboard.tenancy.models import Fund

    with pytest.raises(CommandError) as refused:
        call_command("add_fund", "GENERAL", "--tenant", "acme", "--max-amount", amount)
    assert "\n" not in str(refused.value)
    assert not Fund.objects.filter(tenant__name="acme").exists()


def test_from_a_shell_a_nan_rate_is_one_usage_line_without_a_traceback():
    """Run as an operator would: exit status 2, argparse's usage and one error line."""
    result = subprocess.run(
        [sys.executable, "manage.py", "set_intake_limit", "--tenant", "acme", "--rate", "nan"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "error: argument --rate: 'nan' is not a number from 0.001 to 1e+06" in result.stderr
