"""Regions: every key that belongs to one region names it, and every path that
reads or writes a case, a ledger shard or a counter goes to the region the key names.
Each test here failed before: the ledger shard, the counters and the case id ignored the
region, and every case path read and wrote the first region only."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from reconciliation import clock
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.counters import counter_keys
from reconciliation.cases.models import CASE_ID_PATTERN, is_case_id
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, Disposition, Override
from reconciliation.casework.dispositions import case_dispose, cases_bulk
from reconciliation.casework.overrides import override_request, overrides_expire
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.ledger import LedgerRepository, fund_total
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.dynamo.client import home_region, local_region, regions
from reconciliation.stores import (
    case_store,
    case_tag,
    every_store,
    home_store,
    pledge_stream,
    pledge_stream_parts,
    stream_store,
)
from tests.conftest import staff_actor
from tests.helpers import acting
from tests.reconciliation.factories import crashed_claim, submit

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.dynamodb_local_only]

WHY = {"reason_code": "EVIDENCE_CONFIRMS", "reason_text": "Checked the consistent reads."}


def keys_homed(region_name: str, prefix: str, n: int = 1) -> list[str]:
    """``n`` client keys of tenant acme whose home is ``region_name``."""
    found, i = [], 0
    while len(found) < n:
        key = f"{prefix}-{i}"
        if home_region(claim_pk("acme", OPERATION_CREATE_PLEDGE, key)).name == region_name:
            found.append(key)
        i += 1
    return found


def stuck_cases(keys: list[str]) -> list[str]:
    with clock.travel(-200):
        for key in keys:
            crashed_claim(key)
    return sweep_all(every_store(), home=home_store).opened


def test_keys_of_the_first_region_keep_their_names_and_others_name_theirs():
    with override_settings(
        DDB_REGIONS="us-east-1=http://a:1,eu-west-1=http://b:2", DDB_PRIMARY_REGION="us-east-1"
    ):
        first, second = regions()
        assert (first.tag, second.tag) == ("", "eu-west-1")
        assert pledge_stream("acme#k", "") == "PLEDGE#acme#k"
        assert pledge_stream("acme#k", "eu-west-1") == "PLEDGE#@eu-west-1#acme#k"
        # A client key may hold '@' and '#': the name still parses.
        assert pledge_stream_parts(pledge_stream("acme#a@b#c", "eu-west-1")) == (
            "acme#a@b#c",
            "eu-west-1",
        )
        assert pledge_stream_parts("PLEDGE#acme#a@b") == ("acme#a@b", "")
        assert case_tag("C-ABCDEFGHIJKLMNOP") == ""
        assert case_tag("C-ABCDEFGHIJKLMNOP-eu-west-1") == "eu-west-1"
        assert is_case_id("C-ABCDEFGHIJKLMNOP-eu-west-1")
        assert not is_case_id("C-ABCDEFGHIJKLMNOP-EU")
        assert stream_store("CASE#C-ABCDEFGHIJKLMNOP-eu-west-1").region == second
        assert stream_store("PLEDGE#@eu-west-1#acme#k").region == second
        assert stream_store("STAFF#ada").region == first
        # An id naming no configured region is looked for in the first, not refused.
        assert case_store("C-ABCDEFGHIJKLMNOP-ap-south-1").region == first
        assert {k["case_id"]["S"] for k in counter_keys("eu-west-1")}.isdisjoint(
            {k["case_id"]["S"] for k in counter_keys("")}
        )
    assert CASE_ID_PATTERN.startswith("C-")


@pytest.mark.parametrize("bad", ["US-EAST-1=http://a:1", "a=http://x:1,a=http://y:2", "a b=x"])
def test_a_region_name_that_cannot_be_part_of_a_key_is_refused(bad):
    with override_settings(DDB_REGIONS=bad), pytest.raises(ImproperlyConfigured):
        regions()


def test_the_unpinned_switch_is_honoured_only_where_fault_injection_is():
    with override_settings(
        DDB_REGIONS="us-east-1=http://a:1,eu-west-1=http://b:2",
        AWS_REGION="eu-west-1",
        DDB_UNPINNED=True,
    ):
        pks = [claim_pk("acme", OPERATION_CREATE_PLEDGE, f"u-{n}") for n in range(20)]
        with override_settings(ALLOW_FAULT_INJECTION=False):
            assert {home_region(pk).name for pk in pks} == {"us-east-1", "eu-west-1"}
        with override_settings(ALLOW_FAULT_INJECTION=True):
            assert local_region().name == "eu-west-1"
            assert {home_region(pk).name for pk in pks} == {"eu-west-1"}


def test_each_ledger_shard_belongs_to_one_region_and_totals_sum_them(two_regions):
    """A pledge homed in each region adds to a shard of its own region; no shard of one
    fund is written from both regions, and the fund's total sums both."""
    east, west = keys_homed("us-east-1", "led"), keys_homed("eu-west-1", "led")
    for key in east + west:
        assert submit(key, amount="10.00").kind == OutcomeKind.CREATED
    first, second = every_store()
    pledge_east = PledgeRepository(first).get(f"acme#{east[0]}")
    pledge_west = PledgeRepository(second).get(f"acme#{west[0]}")
    assert "@" not in pledge_east.ledger_key
    assert pledge_west.ledger_key.startswith("GENERAL#USD@eu-west-1#")
    assert LedgerRepository(first).total("GENERAL", "USD").pledged_total == 10
    assert LedgerRepository(second).total("GENERAL", "USD").pledged_total == 10
    assert fund_total(every_store(), "GENERAL", "USD").pledge_count == 2


def test_a_case_lives_in_its_claims_region_and_every_action_acts_there(two_regions):
    """A stuck case homed in the second region: its id names the region; dispose,
    bulk and override expiry find it there (they answered "case not found" before), and
    its counters move in its own region."""
    [west_key] = keys_homed("eu-west-1", "act")
    [east_key] = keys_homed("us-east-1", "act")
    opened = stuck_cases([west_key, east_key])
    west_id = next(c for c in opened if c.endswith("-eu-west-1"))
    east_id = next(c for c in opened if not c.endswith("-eu-west-1"))
    first, second = every_store()
    assert CaseRepository(second).get(west_id) is not None
    assert CaseRepository(first).get(west_id) is None
    assert sum(c.count for c in CaseRepository(second).counters().values()) == 1
    assert sum(c.count for c in CaseRepository(first).counters().values()) == 1

    result = case_dispose(
        disposition=Disposition.ESCALATE,
        **acting().on_id(west_id, seen_version=1, action_id="esc-west", **WHY),
    )
    assert result.applied and CaseRepository(second).get(west_id).state != CaseState.OPEN

    rows = cases_bulk(
        case_ids=[east_id, west_id],
        disposition=Disposition.ESCALATE,
        staff=StaffAction(actor=staff_actor(), **WHY),
        dry_run=True,
        store_for=case_store,
    )
    assert [r.case_id for r in rows] == [east_id, west_id]
    assert "No such case." not in [r.message for r in rows]


def test_override_expiry_and_the_open_case_recheck_run_in_every_region(two_regions, settings):
    [west_key] = keys_homed("eu-west-1", "exp")
    [west_id] = stuck_cases([west_key])
    store = case_store(west_id)
    settings.OVERRIDE_TTL_S = 1
    override_request(
        case_id=west_id,
        override=Override.RELEASE_CLAIM,
        staff=StaffAction(actor=staff_actor(), seen_version=1, action_id="req-west", **WHY),
        store=store,
    )
    with clock.travel(3600):
        expired = [c for s in every_store() for c in overrides_expire(store=s)]
    assert expired == [west_id]

    # The client retries after the lease and its pledge is recorded: the sweep's
    # re-check of open cases resolves the second region's case too.
    [late_key] = keys_homed("eu-west-1", "late")
    [late_id] = stuck_cases([late_key])
    assert submit(late_key).kind == OutcomeKind.CREATED
    settings.AUTO_RESOLVE_COMMITTED = True
    report = sweep_all(every_store(), home=home_store)
    assert late_id in report.auto_resolved
    assert CaseRepository(case_store(late_id)).get(late_id).state == CaseState.RESOLVED


def test_replicas_never_starve_a_regions_own_sweep(two_regions, settings):
    """Under Global Tables the second region's queue index also holds the first's
    (older) cases. Its open-case re-check walked them toward its limit and stopped before
    its own: with three replicas and a limit of three, its own case was never re-checked."""
    from reconciliation.casework.sweeps import recheck_open_cases
    from tests.reconciliation.casework.test_regions_listings import replicate

    with clock.travel(-3600):
        stuck_cases(keys_homed("us-east-1", "old", 3))
    [west_key] = keys_homed("eu-west-1", "mine")
    [west_id] = stuck_cases([west_key])
    replicate()
    assert submit(west_key).kind == OutcomeKind.CREATED
    settings.AUTO_RESOLVE_COMMITTED = True
    report = recheck_open_cases(every_store()[1], limit=3)
    assert report.auto_resolved == [west_id]
