"""Builders of realistic cases through the real write path and sweep."""

from __future__ import annotations

import pytest

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims import intake
from reconciliation.claims.models import pledge_home
from reconciliation.claims.outcomes import IntakeOutcome, OutcomeKind
from reconciliation.claims.request import parse_fields
from reconciliation.simulation import faults
from reconciliation.stores import every_store, home_store
from tests import fault_helpers
from tests.conftest import pledge_body
from tests.helpers import acting, repositories


def submit(key: str, *, tenant: str = "acme", **overrides) -> IntakeOutcome:
    return intake.pledge_submit(
        pledge_home(tenant, key),
        tenant=tenant,
        idempotency_key=key,
        request=parse_fields(pledge_body(**overrides)),
        actor=Actor(username=f"api:{tenant}", role=Role.API, address="127.0.0.1"),
    )


def crashed_claim(key: str, **overrides) -> None:
    """A claim left PENDING by a worker that died between claim and commit."""
    with fault_helpers.injected({"crash_after_claim": 1.0}), pytest.raises(faults.SimulatedCrash):
        submit(key, **overrides)


def stuck_case(key: str, **overrides):
    """A STUCK_PENDING case opened by the sweep for a crashed claim (no pledge)."""
    with clock.travel(-200):  # the worker died 200 s ago: lease and grace have passed
        crashed_claim(key, **overrides)
    report = sweep_all(every_store(), home=home_store)
    [case_id] = [c for c in report.opened]
    return repositories().cases.get(case_id)


def ambiguous_case(key: str, *, tenant: str = "acme", **overrides):
    """An AMBIGUOUS_TIMEOUT case whose commit did in fact succeed."""
    with fault_helpers.injected({"ambiguous_after_commit": 1.0}):
        outcome = submit(key, tenant=tenant, **overrides)
    assert outcome.kind == OutcomeKind.OUTCOME_UNKNOWN
    return repositories().cases.get(outcome.case_id)


def key_reuse_case(ddb, key: str):
    """A CANCELLED_TRANSACTION case: the claim was TTL-deleted and the key came back with
    a different body, so the durable pledge key refused the write."""
    assert submit(key).kind == OutcomeKind.CREATED
    ddb.client.delete_item(
        TableName=ddb.tables.idempotency_keys,
        Key={"pk": {"S": f"acme#create_pledge#{key}"}},
    )
    outcome = submit(key, amount="99.00")
    assert outcome.kind == OutcomeKind.KEY_REUSED
    return repositories().cases.get(outcome.case_id)


def void_requested(case):
    """Finance staff ask to void ``case``'s pledge (the first of the four eyes); the
    service's result, whose case holds the pending request."""
    from reconciliation.cases.vocabulary import Override
    from reconciliation.casework.overrides import override_request

    return override_request(
        override=Override.VOID_PLEDGE,
        **acting("ada").on(
            case, reason_code="DONOR_REQUEST", reason_text="Donor withdrew the pledge by phone."
        ),
    )


def confirmed_committed(case):
    """Finance staff close ``case`` (whose commit went through) as CONFIRMED_COMMITTED;
    the service's result."""
    from reconciliation.casework.dispositions import case_dispose

    return case_dispose(
        disposition="CONFIRMED_COMMITTED",
        **acting("ada").on(
            case, reason_code="EVIDENCE_CONFIRMS", reason_text="The pledge read back is there."
        ),
    )


def void_approved(case) -> None:
    """Void ``case``'s pledge the four-eyes way: finance staff ask, a supervisor
    approves (the pledge is VOIDED and the ledger moves back)."""
    from reconciliation.casework.overrides import override_approve

    requested = void_requested(case)
    override_approve(
        request_id=requested.case.override.request_id,
        **acting("sue", "supervisor").on(
            case,
            seen_version=None,
            reason_code="EVIDENCE_CONFIRMS",
            reason_text="Checked with the donor.",
        ),
    )
