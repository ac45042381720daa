"""The overview's "Needs attention" block: override requests waiting
and cases past their queue's SLA, each linked, from bounded reads."""

from __future__ import annotations

import re

import pytest

from reconciliation import clock
from reconciliation.cases.vocabulary import Queue
from reconciliation.casework.overrides import override_request
from tests.helpers import AS_SYSTEM, acting, overview_get, sign_in
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("midday")]
HOUR = 3600


def attention_block(html: str) -> str:
    match = re.search(r'<section class="card attention[^"]*"(.*?)</section>', html, re.S)
    assert match, "no Needs attention block"
    return match.group(1)


@pytest.mark.engines("moto")
def test_overview_highlights_waiting_requests_and_cases_past_sla(ddb, supervisor_client, settings):
    """A stuck case open 3 h is past a 2 h SLA and linked with the queue page narrowed to
    it; a fresh one is not named; the waiting override request is named and linked."""
    settings.QUEUE_SLA_HOURS = "stuck=2"
    with clock.travel(-3 * HOUR):
        old = stuck_case("na-old")
    fresh = stuck_case("na-new")
    asked = stuck_case("na-ask")
    override_request(
        override="RELEASE_CLAIM",
        **acting("ada").on(
            asked,
            reason_code="CLIENT_CONFIRMED",
            reason_text="The client wants to retry.",
            action_id="na",
        ),
    )
    page = overview_get(supervisor_client)
    assert page.status_code == 200
    block = attention_block(page.content.decode())
    assert "Needs attention" in block and 'class="card attention needs"' in page.content.decode()
    assert (
        '<a href="/approvals/"><strong>1</strong> override request waiting for approval</a>'
        in block
    )
    assert f'<a class="mono" href="/cases/{asked.case_id}/">{asked.case_id}</a>' in block
    assert (
        f'<a href="/queues/stuck/?min_age_h=2"><strong>1</strong> case in '
        f"{Queue.STUCK_PENDING.label} past the 2 h SLA</a>"
    ) in block
    assert f'href="/cases/{old.case_id}/"' in block and "(open 3 h" in block
    assert fresh.case_id not in block
    # The htmx refresh carries the block too.
    fragment = supervisor_client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert "Needs attention" in attention_block(fragment)


@pytest.mark.engines("moto")
def test_overview_says_nothing_needs_attention(ddb, staff_client):
    """With nothing waiting and nothing past SLA the block says so, without a warning."""
    stuck_case("na-fresh")
    html = overview_get(staff_client).content.decode()
    block = attention_block(html)
    assert "Nothing: no override request is waiting" in block
    assert 'class="card attention"' in html


@pytest.mark.engines("moto")
def test_overview_reads_stay_bounded_with_many_cases_past_sla(ddb, client, settings):
    """However many cases are past SLA, the block shows the count and at most three of
    the oldest, read with Limit (never the whole queue)."""
    settings.QUEUE_SLA_HOURS = "stuck=1"
    with clock.travel(-2 * HOUR):
        opened = [stuck_case(f"na-many-{n}") for n in range(6)]
    calls = []
    client_ddb = AS_SYSTEM.store.client
    original = client_ddb.query

    def counting(**kwargs):
        calls.append(kwargs)
        return original(**kwargs)

    client_ddb.query = counting
    try:
        sign_in(client, "finance_staff")
        block = attention_block(overview_get(client).content.decode())
    finally:
        client_ddb.query = original
    assert "<strong>6</strong>" in block
    assert sum(c.case_id in block for c in opened) == 3
    assert all("Limit" in c or c.get("Select") == "COUNT" for c in calls)
    assert not any(c.get("Select") != "COUNT" and c.get("Limit", 0) > 50 for c in calls)


@pytest.mark.engines("moto")
def test_queue_page_marks_rows_past_sla(ddb, staff_client, settings):
    """On the queue page the row of a case open longer than the queue's SLA is marked,
    a younger one is not."""
    settings.QUEUE_SLA_HOURS = "stuck=2"
    with clock.travel(-3 * HOUR):
        old = stuck_case("na-q-old")
    fresh = stuck_case("na-q-new")
    html = staff_client.get("/queues/stuck/").content.decode()
    rows = {
        case_id: row
        for row in re.findall(r"<tr[^>]*>.*?</tr>", html, re.S)
        for case_id in (old.case_id, fresh.case_id)
        if f'href="/cases/{case_id}/"' in row
    }
    assert rows[old.case_id].startswith('<tr class="past-sla">')
    assert "past SLA</span>" in rows[old.case_id]
    assert "past-sla" not in rows[fresh.case_id] and "past SLA" not in rows[fresh.case_id]
