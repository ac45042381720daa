"""The dashboard over two regions: the queue page and its tab counts, "My
cases", the resolved list, the approvals list, case search and the overview list and
count the cases homed in both regions, each once, also when each region's table holds
the other's cases as replicas. Before, every one of them read the first region only."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from reconciliation import clock
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.casework.overrides import override_request
from reconciliation.casework.selectors import case_detail
from reconciliation.stores import case_store, case_tag
from tests.helpers import acting, overview_get, sign_in
from tests.reconciliation.casework.test_regions_listings import (
    RELEASE,
    RETRY,
    SPECS,
    open_cases,
    replicate,
)

pytestmark = [pytest.mark.django_db, pytest.mark.dynamodb_local_only]

HX = {"HTTP_HX_REQUEST": "true"}


def listed(html: str) -> Counter:
    """How often each case is linked on the page."""
    return Counter(re.findall(r'href="/cases/(C-[A-Za-z0-9-]+)/"', html))


def assert_listed_once_each(html: str, ids: list[str]) -> None:
    """Exactly ``ids`` are linked, each as often as the others (a case listed twice
    would be linked twice as often)."""
    links = listed(html)
    assert set(links) == set(ids), (sorted(links), sorted(ids))
    assert len(set(links.values())) == 1, links


def both_regions(ids: list[str]) -> None:
    assert {case_tag(i) for i in ids} == {"", "eu-west-1"}


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_queue_page_lists_and_counts_both_regions(two_regions, staff_client, replicated):
    ids = open_cases()
    both_regions(ids)
    if replicated:
        replicate()
    page = staff_client.get("/queues/stuck/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'aria-current="page">Stuck claims <span class="badge">6</span>' in html
    assert_listed_once_each(html, ids)
    for sort in ("newest", "amount_desc", "fund"):
        fragment = staff_client.get(f"/queues/stuck/?sort={sort}", **HX).content.decode()
        assert_listed_once_each(fragment, ids)
    arts = staff_client.get("/queues/stuck/?fund=ARTS", **HX).content.decode()
    assert_listed_once_each(arts, [ids[1], ids[4]])


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_worklist_lists_both_regions_and_shows_each_row_whole(
    two_regions, staff_client, replicated
):
    """The worklist lists every region's cases once each, and each row, read whole from
    the region its case lives in, shows its fund and donor ref."""
    ids = open_cases()
    both_regions(ids)
    if replicated:
        replicate()
    html = staff_client.get("/worklist/").content.decode()
    assert_listed_once_each(html, ids)
    for n, (case_id, (_region, _age, amount, fund)) in enumerate(zip(ids, SPECS, strict=True)):
        row = re.search(rf'data-case="{case_id}">(.*?)</tr>', html, re.S).group(1)
        words = re.sub(r"<[^>]+>", "", row)
        assert f"D-{n % 2}" in words and fund in words and amount in words, words


def test_queue_page_follows_its_cursor_over_both_regions(two_regions, staff_client, monkeypatch):
    """ "Load more" pages through both regions: every case once; a forged cursor is 400."""
    monkeypatch.setattr("dashboard.staff.views.queues.PAGE_SIZE", 2)
    ids = open_cases()
    seen: Counter = Counter()
    url = "/queues/stuck/"
    for _ in range(5):
        html = staff_client.get(url, **HX).content.decode()
        rows = re.findall(r'<td class="mono case-id"><a href="/cases/(C-[A-Za-z0-9-]+)/">', html)
        seen.update(rows)
        more = re.search(r'hx-get="(/queues/stuck/\?[^"]*cursor=[^"]+)"', html)
        if not more:
            break
        url = more.group(1).replace("&amp;", "&")
    assert seen == Counter(ids)
    assert staff_client.get("/queues/stuck/?cursor=forged").status_code == 400


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_my_cases_resolved_and_approvals_list_both_regions(two_regions, client, replicated):
    ids = open_cases()
    ada = acting("ada")
    for case_id in ids[:2]:
        case_assign(**ada.on_id(case_id, seen_version=1))
    for case_id in ids[2:4]:
        case_dispose(disposition="RETRY_COMMIT", **ada.on_id(case_id, **RETRY, seen_version=1))
    for case_id in ids[4:]:
        override_request(override="RELEASE_CLAIM", **ada.on_id(case_id, **RELEASE, seen_version=1))
    if replicated:
        replicate()
    sign_in(client, "finance_staff", username="ada")
    assert_listed_once_each(client.get("/queues/mine/").content.decode(), ids[:2])
    with clock.travel(60):
        resolved = client.get("/queues/resolved/").content.decode()
    assert_listed_once_each(resolved, ids[2:4])
    client.logout()
    sign_in(client, "supervisor", username="sam")
    approvals = client.get("/approvals/").content.decode()
    assert_listed_once_each(approvals, ids[4:])


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_search_finds_second_region_cases(two_regions, staff_client, replicated):
    from dashboard.tenancy.models import ApiToken

    ApiToken.objects.create(tenant="acme", token_hash="x" * 64, hint="xxxx")
    ids = open_cases()
    if replicated:
        replicate()
    second = ids[1]
    assert case_tag(second) == "eu-west-1"
    assert_listed_once_each(
        staff_client.get(f"/cases/?q={second.lower()}").content.decode(), [second]
    )
    key = case_detail(second, store=case_store(second)).idempotency_key
    assert_listed_once_each(staff_client.get(f"/cases/?q={key}").content.decode(), [second])
    # The queue page's intent-id search reads the intent's home region.
    assert_listed_once_each(
        staff_client.get(f"/queues/stuck/?q=acme%23{key}").content.decode(), [second]
    )
    donors = staff_client.get("/cases/?q=D-1").content.decode()  # odd specs: all in eu-west-1
    assert_listed_once_each(donors, ids[1::2])


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_overview_counts_totals_and_attention_over_both_regions(
    two_regions, supervisor_client, settings, replicated
):
    settings.QUEUE_SLA_HOURS = "stuck=5.5"
    ids = open_cases()
    for case_id in ids[:2]:
        override_request(
            override="RELEASE_CLAIM", **acting("ada").on_id(case_id, **RELEASE, seen_version=1)
        )
    if replicated:
        replicate()
    html = overview_get(supervisor_client).content.decode()
    row = re.search(r'<a href="/queues/stuck/">Stuck claims</a></th>\s*<td class="num">(\d+)', html)
    assert row.group(1) == "4"
    assert f'<a href="/cases/{ids[2]}/" title="opened' in html  # the oldest of either region
    ageing = html[html.index('<table class="ageing">') :]
    stuck_row = re.search(r"<th scope=\"row\">Stuck claims</th>(.*?)</tr>", ageing, re.S).group(1)
    assert re.findall(r'<td class="num">(\d+)</td>', stuck_row) == ["0", "0", "4", "0"]
    assert "<strong>2</strong> override requests waiting for approval" in html
    assert "<strong>2</strong> cases in" in html  # past the stuck SLA: ids[2] and ids[3]
    # The amount at risk: both regions' open cases (250.00 in all, every case open).
    assert "250.00" in html
