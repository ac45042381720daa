"""Drill data kept out of real lists: the drill's cases (tenant ``drill``,
docs/architecture.md) are left out of the open queues, the worklist, the resolved
history, the case search, their CSVs, the overview's counts and amounts at risk and the
approvals, unless asked for ("Show drill data", ``drill=1``); each list says how many it
left out ("N drill cases not shown — show them")."""

from __future__ import annotations

import re

import pytest

from reconciliation.cases.models import DRILL_TENANT
from tests.helpers import overview_get
from tests.reconciliation.factories import ambiguous_case, confirmed_committed, void_requested

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

HX = {"HTTP_HX_REQUEST": "true"}


def _resolved(tenant: str, key: str, donor_ref: str = "D-1"):
    """An ambiguous case of ``tenant`` whose commit went through, confirmed committed."""
    case = ambiguous_case(key, tenant=tenant, donor_ref=donor_ref)
    confirmed_committed(case)
    return case


def ids(html: str) -> list[str]:
    return re.findall(r'<td class="mono case-id"><a href="/cases/([^/]+)/">', html)


def test_resolved_history_leaves_the_drill_out(ddb, staff_client):
    """The resolved list and its CSV show the real case only; with "Show drill data"
    (``drill=1``) the drill's case too, and its Load more keeps the choice."""
    real = _resolved("acme", "real-1")
    drill = _resolved(DRILL_TENANT, "drill-1")
    html = staff_client.get("/queues/resolved/").content.decode()
    assert ids(html) == [real.case_id]
    assert "Show drill data" in html
    csv = b"".join(staff_client.get("/queues/resolved/?format=csv").streaming_content).decode()
    assert real.case_id in csv and drill.case_id not in csv
    shown = staff_client.get("/queues/resolved/?drill=1", **HX).content.decode()
    assert ids(shown) == [drill.case_id, real.case_id]
    assert "format=csv" in shown and "drill=1" in shown  # the CSV link keeps the choice
    csv = b"".join(staff_client.get("/queues/resolved/?drill=1&format=csv").streaming_content)
    assert drill.case_id in csv.decode()


def test_search_leaves_the_drill_out_unless_asked(ddb, staff_client):
    """A donor ref shared by a real and a drill case finds the real one (and its pledge)
    and says one drill case and its pledge were left out, with a link that shows them; a
    drill case's own id finds it."""
    real = _resolved("acme", "real-2", donor_ref="D-77")
    drill = _resolved(DRILL_TENANT, "drill-2", donor_ref="D-77")
    html = staff_client.get("/cases/?q=D-77").content.decode()
    assert ids(html) == [real.case_id]
    assert "1 drill case and 1 drill pledge not shown — " in html  # its pledge too
    assert 'href="/cases/?q=D-77&amp;drill=1">show them</a>' in html
    assert "/pledges/drill/" not in html and "/pledges/acme/real-2/" in html
    assert "Show drill data" in html
    csv = b"".join(staff_client.get("/cases/?q=D-77&format=csv").streaming_content).decode()
    assert real.case_id in csv and drill.case_id not in csv
    both = staff_client.get("/cases/?q=D-77&drill=1").content.decode()
    assert sorted(ids(both)) == sorted([real.case_id, drill.case_id])
    assert "not shown" not in both
    assert ids(staff_client.get(f"/cases/?q={drill.case_id}").content.decode()) == [drill.case_id]


def _open(tenant: str, key: str, amount: str):
    """An open AMBIGUOUS_TIMEOUT case of ``tenant`` (its commit went through)."""
    return ambiguous_case(key, tenant=tenant, amount=amount)


@pytest.fixture
def both(ddb):
    """One real and one drill case open in the ambiguous queue: 10.00 and 7.50 USD."""
    drill = _open(DRILL_TENANT, "drill-9", "7.50")  # opened first: the oldest
    return _open("acme", "real-9", "10.00"), drill


def _csv(client, url: str) -> str:
    return b"".join(client.get(url).streaming_content).decode()


NOTICE = "1 drill case not shown — "


def test_queue_page_leaves_the_drill_out(both, staff_client):
    """The ambiguous queue lists the real case, counts 1 open with the real amount at
    risk, says one drill case is not shown and links the page with ``drill=1``, which
    lists both and counts both; its CSV follows the choice."""
    real, drill = both
    html = staff_client.get("/queues/ambiguous/").content.decode()
    assert ids(html) == [real.case_id]
    assert ": 1 open</strong>" in html and "10.00 USD" in html and "17.50 USD" not in html
    assert NOTICE in html and 'href="/queues/ambiguous/?drill=1">show them</a>' in html
    assert "Show drill data" in html
    csv = _csv(staff_client, "/queues/ambiguous/?format=csv")
    assert real.case_id in csv and drill.case_id not in csv
    shown = staff_client.get("/queues/ambiguous/?drill=1").content.decode()
    assert sorted(ids(shown)) == sorted([real.case_id, drill.case_id])
    assert ": 2 open</strong>" in shown and "17.50 USD" in shown and "not shown" not in shown
    assert drill.case_id in _csv(staff_client, "/queues/ambiguous/?drill=1&format=csv")


def test_worklist_leaves_the_drill_out(both, staff_client):
    """The worklist lists the real case and says one drill case is not shown; with
    ``drill=1`` it lists both (and its totals row sums both); the CSV follows."""
    real, drill = both
    html = staff_client.get("/worklist/").content.decode()
    assert NOTICE in html and 'href="/worklist/?drill=1">show them</a>' in html
    assert "Show drill data" in html
    csv = _csv(staff_client, "/worklist/?format=csv")
    assert real.case_id in csv and drill.case_id not in csv
    shown = staff_client.get("/worklist/?drill=1").content.decode()
    assert real.case_id in shown and drill.case_id in shown and "not shown" not in shown
    assert "17.50 USD" in shown
    assert drill.case_id in _csv(staff_client, "/worklist/?drill=1&format=csv")


def test_overview_counts_leave_the_drill_out(both, supervisor_client):
    """The overview counts one open ambiguous case with 10.00 at risk (not 2 and 17.50),
    its recomputed summary ages one case and names the real one as the oldest (the
    drill's was opened first), and it says one drill case is not shown, linking the
    worklist with ``drill=1``. Its latest events still show the drill's: the record."""
    real, drill = both
    html = overview_get(supervisor_client).content.decode()
    assert "10.00 USD" in html and "17.50 USD" not in html
    row = re.search(r"Ambiguous[^<]*</a></th>\s*<td class=\"num\">(\d+)</td>(.*?)</tr>", html, re.S)
    assert row is not None and row.group(1) == "1"
    assert f"/cases/{real.case_id}/" in row.group(2)  # the oldest: the drill's is older
    ageing = html[html.index('<table class="ageing">') :]
    aged = re.search(r'<th scope="row">Ambiguous timeouts</th>(.*?)</tr>', ageing, re.S)
    assert aged is not None
    assert sum(int(n) for n in re.findall(r'<td class="num">(\d+)</td>', aged.group(1))) == 1
    assert NOTICE in html and 'href="/worklist/?drill=1">show them</a>' in html


def test_approvals_leave_the_drill_out(both, supervisor_client):
    """A void asked on the real and on the drill case: the approvals list the real
    request and say one drill case is not shown; ``drill=1`` lists both."""
    for case in both:
        void_requested(case)
    real, drill = both
    html = supervisor_client.get("/approvals/").content.decode()
    assert f"req-{real.case_id}" in html and f"req-{drill.case_id}" not in html
    assert NOTICE in html and 'href="/approvals/?drill=1">show them</a>' in html
    assert "Show drill data" in html
    shown = supervisor_client.get("/approvals/?drill=1").content.decode()
    assert f"req-{real.case_id}" in shown and f"req-{drill.case_id}" in shown
    assert "not shown" not in shown
