"""The case page's audit status compares the timeline with the head the case item
stores, so a truncated or emptied trail is never "Hash chain intact": a chain checks
only the events it holds, and a shorter one is just as intact."""

from __future__ import annotations

import pytest

from reconciliation.cases.vocabulary import Disposition
from reconciliation.casework.dispositions import case_assign, case_dispose
from tests.helpers import acting, delete_event
from tests.reconciliation.factories import stuck_case

# Views only: the services' engine semantics are tested on both engines in tests/reconciliation.
pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

STAFF = acting("ada")
WHY = dict(reason_code="EVIDENCE_CONFIRMS", reason_text="Checked the consistent reads.")


def test_truncated_timeline_is_not_reported_intact(ddb, staff_client):
    """Deleting the newest event of the case's stream: the page no longer says the chain
    is intact; it says the case stores seq 3 and the stream ends at seq 2. Deleting the
    rest: it says the stream has no events."""
    case = stuck_case("page-trunc-1")
    case = case_assign(**STAFF.on(case)).case
    case = case_dispose(disposition=Disposition.ESCALATE, **STAFF.on(case, **WHY)).case
    url = f"/cases/{case.case_id}/"
    page = staff_client.get(url).content.decode()
    assert "Hash chain intact" in page and "3 events recomputed" in page
    stream = f"CASE#{case.case_id}"
    delete_event(ddb, stream, 3)
    page = staff_client.get(url).content.decode()
    assert "Hash chain intact" not in page
    assert "Audit trail does not match the case" in page
    assert "the case item stores audit_seq 3 but the stream ends at seq 2" in page
    delete_event(ddb, stream, 2)
    delete_event(ddb, stream, 1)
    page = staff_client.get(url).content.decode()
    assert "Hash chain intact" not in page
    assert "the case item stores audit_seq 3 but the stream has no events" in page
