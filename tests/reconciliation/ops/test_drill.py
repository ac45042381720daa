"""The reconciliation drill: passes on DynamoDB Local; on moto it names what it cannot prove."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from reconciliation.claims.models import pledge_home
from reconciliation.ops.drill import drill_last

pytestmark = pytest.mark.django_db(databases=[])


@pytest.mark.engines("dynamodb_local")
def test_drill_passes_on_dynamodb_local(ddb):
    """Every scenario and invariant passes on AWS's engine; the table is printed and the
    run is recorded for the Drill page."""
    out = io.StringIO()
    call_command("drill", stdout=out)
    text = out.getvalue()
    for scenario in (
        "1 first commit",
        "2 identical retry",
        "3 same token, changed amount",
        "4 delayed duplicate",
        "5 ambiguous timeout",
        "6 crash between claim",
        "ledger = intended commitments",
        "every case where expected",
        "every audit chain verifies",
    ):
        assert scenario in text
    assert "FAIL" not in text and "unprovable" not in text
    assert "all provable scenarios passed" in text
    last = drill_last()
    assert last["passed"] is True and len(last["rows"]) == 10  # 9 and "7 two regions"
    # The Drill page shows these rows to supervisors: states, case types and outcomes in
    # words, no stored code.
    from tests.dashboard.test_labels import CODE_RE

    shown = " ".join(f"{r['expected']} {r['observed']}" for r in last["rows"])
    assert not CODE_RE.findall(shown), shown


@pytest.mark.engines("moto")
def test_drill_reports_unprovable_token_scenarios_on_moto(ddb):
    """moto does not honour ClientRequestToken: scenarios 2 and 3 are reported as not
    proven (never passed) and the rest still pass."""
    out = io.StringIO()
    call_command("drill", stdout=out)
    text = out.getvalue()
    assert "not proven here: 2 identical retry, same token, 3 same token, changed amount" in text
    assert "FAIL" not in text
    statuses = {r["scenario"][:1]: r["status"] for r in drill_last()["rows"]}
    assert statuses["2"] == statuses["3"] == "unprovable"
    assert statuses["1"] == statuses["4"] == statuses["5"] == statuses["6"] == "pass"


def test_drill_crash_lease_and_faults_are_the_drill_claims_alone(ddb, monkeypatch, settings):
    """While the drill's crash scenario runs, another request in the same process (as in
    the Celery worker behind the Drill page) takes a claim: it gets the configured lease
    and meets none of the drill's faults (it commits), while the drill's own claim gets
    the drill's 1-second lease and its crash."""
    from reconciliation import clock
    from reconciliation.actors import Actor, Role
    from reconciliation.claims import intake
    from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
    from reconciliation.claims.outcomes import OutcomeKind
    from reconciliation.claims.repository import ClaimRepository
    from reconciliation.claims.request import parse_fields
    from reconciliation.ops import drill as drill_module
    from reconciliation.ops import drill_scenarios

    original_submit = drill_scenarios.Drill.submit
    original_create = ClaimRepository.create
    leases: dict[str, int] = {}  # claim pk -> the lease its claim was created with
    others: list[str] = []

    def create(self, claim):
        leases[claim.pk] = claim.expires_at - clock.epoch(clock.parse_iso(claim.claimed_at))
        return original_create(self, claim)

    def submit(self, key, *args, **kwargs):
        plan = self.stores.scope.plan()
        if plan is None or not plan.probabilities.get("crash_after_claim"):
            return original_submit(self, key, *args, **kwargs)
        # The crash scenario: its submission raises SimulatedCrash after the claim.
        try:
            return original_submit(self, key, *args, **kwargs)
        finally:
            request = parse_fields(
                {"donor_ref": "D-1", "fund": "GENERAL", "amount": "5.00", "currency": "USD"}
            )
            other = Actor(username="api:acme", role=Role.API, address="10.0.0.9")
            outcome = intake.pledge_submit(
                pledge_home("acme", "other-1"),
                tenant="acme",
                idempotency_key="other-1",
                request=request,
                actor=other,
            )
            others.append(outcome.kind)
            leases["drill"] = leases[claim_pk(drill_scenarios.TENANT, OPERATION_CREATE_PLEDGE, key)]

    settings.CLAIM_PENDING_TTL_S = 60  # the configured lease (test set-up, before the run)
    monkeypatch.setattr(ClaimRepository, "create", create)
    monkeypatch.setattr(drill_scenarios.Drill, "submit", submit)
    report = drill_module.drill_run()
    assert leases["drill"] == 1
    assert leases[claim_pk("acme", OPERATION_CREATE_PLEDGE, "other-1")] == 60
    assert others == [OutcomeKind.CREATED]
    assert settings.CLAIM_PENDING_TTL_S == 60
    assert not [r for r in report.rows if r.status == "FAIL"], report.table()
