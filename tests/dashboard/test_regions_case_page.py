"""A case living in the second region: its page, its evidence, every action
on it and the retry task reach it in its own region. Before, each read the first region
and answered 404 "case not found"."""

from __future__ import annotations

import uuid

import pytest

from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.stores import case_store, every_store
from tests.helpers import overview_get
from tests.reconciliation.test_regions_routing import keys_homed, stuck_cases

pytestmark = [pytest.mark.django_db, pytest.mark.dynamodb_local_only]

HX = {"HTTP_HX_REQUEST": "true"}


def test_a_second_region_case_is_shown_and_acted_on_in_its_region(two_regions, staff_client):
    [key] = keys_homed("eu-west-1", "page")
    [case_id] = stuck_cases([key])
    assert case_id.endswith("-eu-west-1")
    page = staff_client.get(f"/cases/{case_id}/")
    assert page.status_code == 200 and case_id in page.content.decode()
    assert staff_client.get(f"/cases/{case_id}/evidence/", **HX).status_code == 200
    answer = staff_client.post(
        f"/cases/{case_id}/dispose/",
        {
            "disposition": "ESCALATE",
            "seen_version": 1,
            "action_id": str(uuid.uuid4()),
            "reason_code": "NEEDS_REVIEW",
            "reason_text": "Second region case, escalated from the first.",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert CaseRepository(case_store(case_id)).get(case_id).state == CaseState.ESCALATED
    # Only in its own region: the first region's table never held it.
    first, _second = every_store()
    assert CaseRepository(first).get(case_id) is None


def test_a_commit_retry_records_the_pledge_in_the_cases_region(two_regions, staff_client):
    """RETRY_COMMIT on a second-region stuck case (the task runs inline here): the claim,
    pledge and ledger it writes are the second region's, and the case resolves there."""
    [key] = keys_homed("eu-west-1", "retry")
    [case_id] = stuck_cases([key])
    answer = staff_client.post(
        f"/cases/{case_id}/dispose/",
        {
            "disposition": "RETRY_COMMIT",
            "seen_version": 1,
            "action_id": str(uuid.uuid4()),
            "reason_code": "TRANSIENT_FAILURE",
            "reason_text": "The worker died before committing; retry it.",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:500]
    first, second = every_store()
    assert CaseRepository(second).get(case_id).state == CaseState.RESOLVED
    pledge = PledgeRepository(second).get(f"acme#{key}")
    assert pledge is not None and "@eu-west-1#" in pledge.ledger_key
    assert PledgeRepository(first).get(f"acme#{key}") is None


def test_the_overviews_latest_events_come_from_every_region(two_regions, staff_client):
    from reconciliation.casework.selectors import recent_audit_events

    [key] = keys_homed("eu-west-1", "events")
    [case_id] = stuck_cases([key])
    streams = [e["stream"] for e in recent_audit_events(stores=every_store(), limit=50)]
    assert f"CASE#{case_id}" in streams
    assert case_id in overview_get(staff_client).content.decode()


def test_the_case_page_names_the_region_a_case_lives_in(two_regions, staff_client, settings):
    [key] = keys_homed("eu-west-1", "where")
    [case_id] = stuck_cases([key])
    assert "<dt>Region</dt><dd>eu-west-1" in staff_client.get(f"/cases/{case_id}/").content.decode()
