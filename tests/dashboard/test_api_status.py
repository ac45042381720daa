"""The intake view's outcome-to-HTTP map and the domain's outcome vocabulary agree."""

from __future__ import annotations

from dashboard.views.api import STATUS
from reconciliation.claims.outcomes import OUTCOME_KINDS


def test_status_maps_exactly_the_outcome_kinds():
    """Every outcome kind the intake service can answer has an HTTP status, and the map
    names no kind the service does not know (the fault explorer relies on it)."""
    assert set(STATUS) == OUTCOME_KINDS
