"""The intake view's outcome-to-HTTP map and the domain's outcome vocabulary agree."""

from __future__ import annotations

from dashboard.lib.statuses import INTAKE as STATUS
from reconciliation.claims.outcomes import OUTCOME_KINDS


def test_status_maps_exactly_the_outcome_kinds():
    """Every outcome kind the intake service can answer has an HTTP status, and the map
    names no kind the service does not know (the fault explorer relies on it)."""
    assert set(STATUS) == OUTCOME_KINDS


def test_every_case_refusal_kind_has_a_status():
    """Each kind of refused case action (``CaseError.code``) maps to one status at the
    edge, and the domain's errors carry no status of their own."""
    import reconciliation.casework.evidence  # noqa: F401  (declares EvidenceRefused)
    from dashboard.lib.statuses import CASE_REFUSAL
    from reconciliation.cases.changes import CaseError

    def kinds_of(cls: type[CaseError]) -> list[type[CaseError]]:
        return [cls, *(k for sub in cls.__subclasses__() for k in kinds_of(sub))]

    every = kinds_of(CaseError)
    assert {cls.code for cls in every} == set(CASE_REFUSAL)
    assert not any(hasattr(cls, "status") for cls in every)
