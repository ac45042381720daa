"""The drill's share of the queue counters (reconciliation/cases/counters.py): drill
cases move ``drill_open_count`` and their totals with the count, so a page can leave
the drill out without reading a case; only a case marked ``drill_tallied`` moves it."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from reconciliation.actors import system_actor
from reconciliation.cases.counters import QueueCounter
from reconciliation.cases.models import DRILL_TENANT, case_id_for, case_to_item
from reconciliation.cases.vocabulary import CaseState, Queue
from reconciliation.casework.overview import overview_read, overview_summary_refresh
from reconciliation.claims.opening import case_open
from reconciliation.stores import every_store
from tests.helpers import AS_SYSTEM, repositories
from tests.reconciliation.factories import ambiguous_case, confirmed_committed

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

AMBIGUOUS = Queue.AMBIGUOUS_TIMEOUT


def ambiguous(tenant: str, key: str, amount: str = "10.00"):
    """An AMBIGUOUS_TIMEOUT case of ``tenant`` whose commit went through."""
    return ambiguous_case(key, tenant=tenant, amount=amount)


def counter() -> QueueCounter:
    return repositories().cases.counters()[AMBIGUOUS]


def test_a_drill_case_moves_the_drill_share_with_the_count(ddb):
    """A real and a drill case open: the counter holds both, its drill share the drill's
    alone, and without the drill the real case only; resolving the drill case takes
    its share back to zero."""
    real = ambiguous("acme", "real-1", amount="10.00")
    drill = ambiguous(DRILL_TENANT, "drill-1", amount="7.50")
    assert drill.drill_tallied and not real.drill_tallied
    opened = counter()
    assert (opened.count, opened.drill_count, opened.drill_totalled) == (2, 1, 1)
    assert opened.amounts == {"USD": Decimal("17.50")}
    assert opened.drill_amounts == {"USD": Decimal("7.50")}
    real_only = opened.without_drill()
    assert (real_only.count, real_only.totalled) == (1, 1)
    assert real_only.shown_amounts() == [("USD", Decimal("10.00"))]
    confirmed_committed(drill)
    closed = counter()
    assert (closed.count, closed.drill_count, closed.drill_totalled) == (1, 0, 0)
    assert closed.drill_amounts == {"USD": Decimal(0)}
    assert closed.without_drill().shown_amounts() == [("USD", Decimal("10.00"))]


def test_the_flag_is_stored_on_drill_cases_only(ddb):
    """A real case's item has no ``drill_tallied`` attribute (its stored bytes are as
    before); a drill case's says true and reads back."""
    real = ambiguous("acme", "real-2")
    drill = ambiguous(DRILL_TENANT, "drill-2")
    assert "drill_tallied" not in case_to_item(real)
    assert case_to_item(drill)["drill_tallied"] == {"BOOL": True}
    assert repositories().cases.get(drill.case_id).drill_tallied is True


def test_a_drill_case_opened_before_the_share_takes_nothing_away(ddb):
    """A drill case opened before the share was kept (no flag) moves the count alone:
    resolving it leaves the drill share at zero, never below."""
    template = ambiguous(DRILL_TENANT, "drill-3")
    confirmed_committed(template)
    older = replace(
        template,
        case_id=case_id_for("older-drill", 1, template.case_type),
        version=1,
        state=CaseState.OPEN,
        queue=AMBIGUOUS,
        queue_sort=f"{template.opened_at}#older",
        resolution=None,
        resolved_by=None,
        resolved_how=None,
        resolved_month=None,
        resolved_sort=None,
        drill_tallied=False,
    )
    stored, created = case_open(AS_SYSTEM.store, case=older, actor=system_actor())
    assert created
    assert (counter().count, counter().drill_count) == (1, 0)
    confirmed_committed(stored)
    after = counter()
    assert (after.count, after.drill_count, after.drill_totalled) == (0, 0, 0)


def test_the_overview_summary_stays_fresh_with_the_drill_share(ddb, settings):
    """The overview's summary computed once (by the worker the first view asks) with a
    drill case open; the next view finds it fresh (the share is no count of its own),
    and shows the real count."""
    ambiguous("acme", "real-4")
    ambiguous(DRILL_TENANT, "drill-4")

    def worker() -> bool:
        overview_summary_refresh(stores=every_store())
        return True

    first = overview_read(stores=every_store(), max_age_s=60, refresh_later=worker)
    assert first.summary is None and first.refreshing
    again = overview_read(stores=every_store(), max_age_s=60, refresh_later=worker)
    assert again.summary is not None and not again.refreshing
    assert again.counters[AMBIGUOUS].count == 2
    assert again.counters[AMBIGUOUS].without_drill().count == 1
