"""The overview in a real browser: the ageing table's "All queues" row totals each age
bucket under that bucket's column (its amounts sat under "1–4 h"), and no amount at risk
breaks across lines ("1,423.50 / USD"), at 1280 and at 390 px."""

from __future__ import annotations

import pytest

from reconciliation import clock
from reconciliation.casework.overview import overview_summary_refresh
from reconciliation.stores import every_store
from tests.reconciliation.factories import stuck_case

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1280, 390])
def test_ageing_totals_sit_under_their_buckets_and_amounts_stay_whole(
    ddb, open_browser, live_server, width
):
    with clock.travel(-30 * 3600):
        stuck_case("ov-age-1", amount="1423.50", currency="USD")
    with clock.travel(-2 * 3600):
        stuck_case("ov-age-2", amount="98765.43", currency="GBP")
        stuck_case("ov-age-3", amount="250000.00", currency="EUR")
    stuck_case("ov-age-4", amount="12.00", currency="USD")
    # As a worker leaves the summary after these cases: no view computes it itself.
    overview_summary_refresh(stores=every_store())
    page = open_browser("supervisor", width)
    assert page.url == f"{live_server.url}/"

    ageing = page.locator("table.ageing")
    heads = ageing.locator("thead th")
    foot = ageing.locator("tfoot tr td")
    labels = heads.all_inner_texts()[1:-1]  # the buckets, between "Queue" and the chart
    assert labels == ["< 1 h", "1–4 h", "4–24 h", "> 24 h"]
    # One total per bucket, each the sum of its column, under its column.
    assert foot.all_inner_texts()[: len(labels)] == ["1", "2", "0", "1"]
    for n in range(len(labels)):
        head_box = heads.nth(n + 1).bounding_box()
        foot_box = foot.nth(n).bounding_box()
        assert head_box and foot_box
        assert abs(head_box["x"] - foot_box["x"]) < 1, labels[n]
        assert abs(head_box["width"] - foot_box["width"]) < 1, labels[n]
    assert "USD" not in ageing.locator("tfoot").inner_text()  # no amounts in the ageing

    # Every amount at risk on the page is one line box: never "1,423.50" / "USD".
    amounts = page.locator(".at-risk [data-currency]")
    assert amounts.count() >= 6  # per queue and in the open cases' totals row
    broken = amounts.evaluate_all(
        "els => els.filter(e => e.getClientRects().length > 1).map(e => e.textContent)"
    )
    assert broken == []
