"""A LEDGER_DRIFT case's page: the fund, currency, region(s), the
ledger total, the pledges' sum, the difference and the intents that explain it, with
links; no claim, token or cancellation panels; words, not codes, for every role; and the
dispositions a finance team records on it (a reason always, never a money move). Failed
before: there was no such case."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client

from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState
from reconciliation.casework.drift.check import ledger_drift_check
from reconciliation.claims.ledger import fund_total
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.stores import every_store, home_store
from tests.dashboard.test_labels import CODE_RE, MICROSECONDS, signed_in, visible_text
from tests.helpers import AS_SYSTEM
from tests.reconciliation.factories import submit

pytestmark = [pytest.mark.django_db, pytest.mark.dynamodb_local_only]


@pytest.fixture
def duplicate_case(two_regions, settings) -> str:
    """One intent recorded in both regions (unpinned), the pledges table keeping the
    second region's write: the check's overall LEDGER_DRIFT case."""
    settings.LEDGER_DRIFT_SETTLE_S = 0
    settings.LEDGER_DRIFT_CONFIRM_MS = 0
    ledger_drift_check(every_store(), home=home_store, force=True)
    settings.ALLOW_FAULT_INJECTION = True
    settings.DDB_UNPINNED = True
    for region in ("us-east-1", "eu-west-1"):
        settings.AWS_REGION = region
        assert submit("page-twice", amount="40.00").kind == OutcomeKind.CREATED
    settings.DDB_UNPINNED = False
    first, second = every_store()
    key = {"intent_id": {"S": "acme#page-twice"}}
    item = second.client.get_item(TableName=second.tables.pledges, Key=key)["Item"]
    first.client.put_item(TableName=first.tables.pledges, Item=item)
    [case_id] = ledger_drift_check(every_store(), home=home_store, force=True).opened
    return case_id


@pytest.mark.parametrize("role", ["finance_staff", "supervisor", "auditor"])
def test_the_drift_page_shows_the_finding_in_words(duplicate_case, role):
    client: Client = signed_in(role)
    page = client.get(f"/cases/{duplicate_case}/")
    assert page.status_code == 200
    html = page.content.decode()
    text = visible_text(html)
    for shown in ("GENERAL · USD", "us-east-1", "eu-west-1", "Ledger total", "80.00"):
        assert shown in text, shown
    assert "Recorded pledges" in text and "40.00" in text
    assert "acme page-twice" in text and "Recorded in two regions" in text
    assert 'href="/audit/?intent_id=acme%23page-twice"' in html
    assert 'href="/cases/?q=acme%23page-twice"' in html
    # Nothing of a claim's case: no token window, no cancellation reasons, no client.
    for absent in ("Token window", "Decoded cancellation reasons", "Client was told", "Intent id"):
        assert absent not in text, absent
    assert not CODE_RE.findall(text) and not MICROSECONDS.findall(text)
    offered = 'value="DRIFT_EXPLAINED"' in html and 'value="DRIFT_CORRECTED"' in html
    assert offered == (role != "auditor")
    assert "Release the claim" not in text and "Void the pledge" not in text
    queue = client.get("/queues/drift/")
    assert queue.status_code == 200 and duplicate_case in queue.content.decode()
    # Its row reads the fund's ledger (it has no intent; the link read "#" before).
    assert re.search(
        rf'/cases/{duplicate_case}/"><span [^>]*>GENERAL USD ledger</span></a>',
        queue.content.decode(),
    )
    assert not CODE_RE.findall(visible_text(queue.content.decode()))


def _dispose(client: Client, case_id: str, disposition: str, reason: str):
    case = CaseRepository(AS_SYSTEM.store).get(case_id)
    assert case is not None
    return client.post(
        f"/cases/{case_id}/dispose/",
        {
            "disposition": disposition,
            "seen_version": case.version,
            "action_id": str(uuid.uuid4()),
            "reason_code": "DATA_CORRECTION",
            "reason_text": reason,
        },
    )


def test_staff_record_what_they_found_and_no_money_moves(duplicate_case):
    client = signed_in("finance_staff")
    before = fund_total(every_store(), "GENERAL", "USD")
    refused = _dispose(client, duplicate_case, "DRIFT_CORRECTED", "")
    assert refused.status_code == 400  # a reason is required
    assert _dispose(client, duplicate_case, "ESCALATE", "Two regions; ask.").status_code == 302
    assert CaseRepository(AS_SYSTEM.store).get(duplicate_case).state == CaseState.ESCALATED
    supervisor = signed_in("supervisor")
    done = _dispose(supervisor, duplicate_case, "DRIFT_CORRECTED", "Reversed by journal J-17.")
    assert done.status_code == 302
    case = CaseRepository(AS_SYSTEM.store).get(duplicate_case)
    assert case.state == CaseState.RESOLVED and case.resolution.disposition == "DRIFT_CORRECTED"
    assert fund_total(every_store(), "GENERAL", "USD") == before
