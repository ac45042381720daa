"""The drill's two-region scenario (reconciliation/ops/drill_regions.py): it passes with
two regions, says "not applicable" with one, and fails when a key is written outside its
home region."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from reconciliation.ops import drill_scenarios
from reconciliation.ops.drill import drill_last, drill_run
from reconciliation.ops.drill_report import DrillStatus
from reconciliation.stores import every_store
from tests.helpers import scan_all, sign_in

pytestmark = pytest.mark.django_db(databases=[])

REGION_ROWS = (
    "7 two regions: keys commit at home",
    "7 two regions: a case in eu-west-1",
    "7 two regions: ledger over every region",
)


def rows(report) -> dict[str, object]:
    return {r.scenario: r for r in report.rows}


def test_two_regions_every_row_passes(two_regions):
    """With two engines the drill runs the two-region rows after the six scenarios, and
    every row passes: keys commit in their home region, the second region's case is
    listed over every region and its id names it, the ledger sums both regions."""
    out = io.StringIO()
    call_command("drill", stdout=out)
    text = out.getvalue()
    assert "all provable scenarios passed" in text, text
    last = drill_last()
    by_name = {r["scenario"]: r for r in last["rows"]}
    for name in REGION_ROWS:
        assert by_name[name]["status"] == DrillStatus.PASS, by_name[name]
    home = by_name[REGION_ROWS[0]]["observed"]
    assert "us-east-1 key: in its home, absent from eu-west-1" in home, home
    assert "eu-west-1 key: in its home, absent from us-east-1" in home, home
    case = by_name[REGION_ROWS[1]]["observed"]
    assert "-eu-west-1" in case and "lists it" in case and "retry resolved it" in case, case
    assert all(r["status"] == DrillStatus.PASS for r in last["rows"]), last["rows"]
    # The drill's records landed in both regions (no replication in this fixture): each
    # region's table holds pledge receipts under its own stream names only.
    first, second = every_store()
    assert any(
        e["stream"].startswith("PLEDGE#@eu-west-1#")
        for e in scan_all(second, second.tables.audit_events)
    )
    assert not any(
        e["stream"].startswith("PLEDGE#@") for e in scan_all(first, first.tables.audit_events)
    )


@pytest.mark.engines("dynamodb_local")
def test_one_region_is_not_applicable_not_failed(ddb):
    """With one region the scenario is one row, reported as not applicable, and the drill
    still passes."""
    report = drill_run()
    row = rows(report)["7 two regions"]
    assert row.status == DrillStatus.NOT_APPLICABLE and "one region configured" in row.observed
    assert report.passed and not report.unprovable
    assert not any(r.scenario in REGION_ROWS for r in report.rows)


def test_a_key_written_outside_its_home_fails(two_regions, settings, monkeypatch):
    """The routing the seed warns about: the two-region scenario's keys submitted by a
    process that writes every key in its own region (``DDB_UNPINNED``, running in
    us-east-1). The key homed in eu-west-1 is then missing from its home and written in
    us-east-1, and the row fails."""
    from reconciliation.ops import drill as drill_module

    original_submit = drill_scenarios.Drill.submit
    original_scenario = drill_module.regions_scenario
    unpinned = {"on": False}

    def submit(self, *args, **kwargs):
        settings.DDB_UNPINNED = unpinned["on"]
        try:
            return original_submit(self, *args, **kwargs)
        finally:
            settings.DDB_UNPINNED = False

    def scenario(drill):
        unpinned["on"] = True
        original_scenario(drill)

    settings.AWS_REGION = "us-east-1"
    settings.ALLOW_FAULT_INJECTION = True
    monkeypatch.setattr(drill_scenarios.Drill, "submit", submit)
    monkeypatch.setattr(drill_module, "regions_scenario", scenario)
    report = drill_run()
    home = rows(report)[REGION_ROWS[0]]
    assert home.status == DrillStatus.FAIL, home
    assert "eu-west-1 key: missing from its home, written in us-east-1 too" in home.observed
    assert not report.passed


@pytest.mark.django_db
@pytest.mark.engines("dynamodb_local")
def test_drill_page_shows_not_applicable(ddb, client):
    """The Drill page shows the one-region row as not applicable, not as a failure."""
    drill_run()
    sign_in(client, "supervisor")
    body = client.get("/drill/").content.decode()
    assert "7 two regions" in body and "not applicable" in body
    assert "FAIL" not in body and "passed" in body
