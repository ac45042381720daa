"""The request's schema version (``Pledge-Version``) is shown: on the case page
(its summary of the request), on the pledge page (pledge and claim), and in the drill's
record; a record stored before versions existed reads as the first version and says so.
The version is a date in ``<code>``, never a bare stored code."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.utils.html import escape

from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, intent_id_for
from reconciliation.claims.versions import FIRST, VERSIONS
from tests.helpers import sign_in
from tests.reconciliation.claims.test_pledge_versions import LATER
from tests.reconciliation.factories import stuck_case, submit

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

SHOWN = f'<code title="{escape(FIRST.summary)}">{FIRST.name}</code>'


def test_the_case_page_shows_the_claims_request_version(ddb, staff_client):
    """A case opened for a claim stored under the first version names it beside the
    request; the case record keeps it (``case.request.pledge_version``)."""
    case = stuck_case("ver-case")
    assert case.request.pledge_version == FIRST.name
    html = staff_client.get(f"/cases/{case.case_id}/").content.decode()
    assert "<dt>Request version</dt>" in html and SHOWN in html
    assert "stored before versions" not in html


def test_a_case_of_a_claim_stored_under_a_later_version_names_that_version(ddb, client):
    with VERSIONS.extended(LATER, current=LATER.name):
        case = stuck_case("ver-later")
        assert case.request.pledge_version == LATER.name
        sign_in(client)
        html = client.get(f"/cases/{case.case_id}/").content.decode()
    assert f'<code title="{escape(LATER.summary)}">{LATER.name}</code>' in html


def test_the_pledge_page_shows_the_version_of_pledge_and_claim(ddb, staff_client):
    submit("ver-page")
    html = staff_client.get(f"/pledges/acme/{quote('ver-page')}/").content.decode()
    assert html.count("<dt>Request version</dt>") == 2  # the pledge's and the claim's
    assert html.count(SHOWN) == 2


def test_records_stored_before_versions_read_as_the_first_version(ddb, staff_client):
    """A claim and a pledge without ``pledge_version`` show the first version, marked as
    read rather than stored."""
    submit("ver-old")
    ddb.client.update_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": claim_pk("acme", OPERATION_CREATE_PLEDGE, "ver-old")}},
        UpdateExpression="REMOVE pledge_version",
    )
    ddb.client.update_item(
        TableName=ddb.tables.pledges,
        Key={"intent_id": {"S": intent_id_for("acme", "ver-old")}},
        UpdateExpression="REMOVE pledge_version",
    )
    html = staff_client.get("/pledges/acme/ver-old/").content.decode()
    assert html.count("stored before versions: the first") == 2
    assert html.count(SHOWN) == 2


def test_the_drill_records_and_shows_the_version_it_sent(ddb, supervisor_client):
    """The drill's record names the version its requests were sent under, as its first
    commit's claim and pledge stored it; the Drill page shows it."""
    from reconciliation.ops.drill import drill_last, drill_run

    report = drill_run()
    assert report.pledge_version == FIRST.name
    last = drill_last()
    assert last is not None and last["pledge_version"] == FIRST.name
    [first] = [r for r in last["rows"] if r["scenario"] == "1 first commit"]
    assert first["status"] == "pass"
    assert f"store version {FIRST.name} and {FIRST.name}" in first["observed"]
    html = supervisor_client.get("/drill/").content.decode()
    assert "request version" in html and SHOWN in html
