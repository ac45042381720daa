"""The queue page's counts stay true: when the table reloads itself after an action
(``queue-changed``) or while a retry runs, the header's open count, the amount at risk
and the tab counts come along out of band, read at the same moment as the rows, so the
two cannot disagree; a filter, a sort or "Load more" moves no case, so it reads no
counter."""

from __future__ import annotations

import re

import pytest

from reconciliation.casework.dispositions import case_dispose
from tests.helpers import acting
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.engines("moto")]

REFRESH = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TRIGGER": "results"}
FILTER = {"HTTP_HX_REQUEST": "true"}


def test_table_reload_carries_the_counts(ddb, staff_client):
    """After a case left the queue, the table's own reload shows the new open count,
    amount at risk and tab counts in an out-of-band ``#queue-counts``."""
    stuck_case("cr-1", amount="20.00")
    gone = stuck_case("cr-2", amount="500.00")
    assert "Stuck claims: 2 open" in staff_client.get("/queues/stuck/").content.decode()
    case_dispose(
        disposition="ESCALATE",
        **acting().on(gone, reason_code="NEEDS_REVIEW", reason_text="A closer look."),
    )
    body = staff_client.get("/queues/stuck/", **REFRESH).content.decode()
    assert body.lstrip().startswith('<section id="results"')
    counts = re.search(r'<div id="queue-counts" hx-swap-oob="true">.*?</nav>', body, re.S)
    assert counts, body
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", counts.group(0)))
    assert "Stuck claims: 1 open" in text and "20.00" in text and "520.00" not in text
    assert "Stuck claims 1" in text and "Escalated 1" in text


def test_filtering_reads_no_counter(ddb, staff_client):
    """A filter or sort (the form or a header asked, not the table) moves no case: the
    fragment is the table alone, with no counts."""
    stuck_case("cr-3")
    body = staff_client.get("/queues/stuck/?sort=amount", **FILTER).content.decode()
    assert body.lstrip().startswith('<section id="results"')
    assert "queue-counts" not in body and "hx-swap-oob" not in body
