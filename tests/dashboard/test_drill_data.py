"""Drill data kept out of real lists (issue 4 of the batch): the drill's cases (tenant
``drill``, docs/architecture.md) are left out of the resolved history, the case search
and their CSVs unless asked for ("Show drill data", ``drill=1``)."""

from __future__ import annotations

import re

import pytest

from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.models import DRILL_TENANT
from reconciliation.casework.dispositions import case_dispose
from reconciliation.claims import intake
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.request import parse_fields
from reconciliation.dynamo import faults
from reconciliation.stores import first_store
from tests.conftest import pledge_body, staff_actor
from tests.helpers import repositories, sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}


def _resolved(tenant: str, key: str, donor_ref: str = "D-1"):
    """An ambiguous case of ``tenant`` whose commit went through, confirmed committed."""
    actor = Actor(username=f"api:{tenant}", role=Role.API, address="127.0.0.1")
    with faults.injected({"ambiguous_after_commit": 1.0}):
        outcome = intake.pledge_submit(
            tenant=tenant,
            idempotency_key=key,
            request=parse_fields(pledge_body(donor_ref=donor_ref)),
            actor=actor,
        )
    assert outcome.kind == OutcomeKind.OUTCOME_UNKNOWN
    case = repositories().cases.get(outcome.case_id)
    case_dispose(
        case_id=case.case_id,
        disposition="CONFIRMED_COMMITTED",
        staff=StaffAction(
            actor=staff_actor("ada"),
            seen_version=case.version,
            reason_code="EVIDENCE_CONFIRMS",
            reason_text="The pledge read back is there.",
        ),
        store=first_store(),
    )
    return case


def ids(html: str) -> list[str]:
    return re.findall(r'<td class="mono case-id"><a href="/cases/([^/]+)/">', html)


def test_resolved_history_leaves_the_drill_out(ddb, client):
    """The resolved list and its CSV show the real case only; with "Show drill data"
    (``drill=1``) the drill's case too, and its Load more keeps the choice."""
    real = _resolved("acme", "real-1")
    drill = _resolved(DRILL_TENANT, "drill-1")
    sign_in(client)
    html = client.get("/queues/resolved/").content.decode()
    assert ids(html) == [real.case_id]
    assert "Show drill data" in html
    csv = b"".join(client.get("/queues/resolved/?format=csv").streaming_content).decode()
    assert real.case_id in csv and drill.case_id not in csv
    shown = client.get("/queues/resolved/?drill=1", **HX).content.decode()
    assert ids(shown) == [drill.case_id, real.case_id]
    assert "format=csv" in shown and "drill=1" in shown  # the CSV link keeps the choice
    csv = b"".join(client.get("/queues/resolved/?drill=1&format=csv").streaming_content)
    assert drill.case_id in csv.decode()


def test_search_leaves_the_drill_out_unless_asked(ddb, client):
    """A donor ref shared by a real and a drill case finds the real one and says one
    drill case was left out, with a link that shows it; a drill case's own id finds it."""
    real = _resolved("acme", "real-2", donor_ref="D-77")
    drill = _resolved(DRILL_TENANT, "drill-2", donor_ref="D-77")
    sign_in(client)
    html = client.get("/cases/?q=D-77").content.decode()
    assert ids(html) == [real.case_id]
    assert "1 drill case (the rehearsal's own data) left out" in html
    assert "/cases/?q=D-77&amp;drill=1" in html
    csv = b"".join(client.get("/cases/?q=D-77&format=csv").streaming_content).decode()
    assert real.case_id in csv and drill.case_id not in csv
    both = client.get("/cases/?q=D-77&drill=1").content.decode()
    assert sorted(ids(both)) == sorted([real.case_id, drill.case_id])
    assert "left out" not in both
    assert ids(client.get(f"/cases/?q={drill.case_id}").content.decode()) == [drill.case_id]
