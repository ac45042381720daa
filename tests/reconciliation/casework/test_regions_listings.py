"""Case listings over two regions: every queue page (each order, filters and
cursors), "My cases", the resolved list, counts, amount totals, ageing, the oldest case,
search and the supervisors' digest show the cases homed in both regions, each exactly
once, also when each region's table holds the other's cases as replicas (as Global
Tables leave them). Before, each of them read the first region only."""

from __future__ import annotations

from decimal import Decimal

import pytest

from reconciliation import clock
from reconciliation.cases.vocabulary import Queue
from reconciliation.casework.dispositions import case_assign, case_dispose
from reconciliation.casework.history import assigned_page, resolved_page
from reconciliation.casework.notifications import sla_parse, supervisor_digest
from reconciliation.casework.overrides import override_request
from reconciliation.casework.search import case_search, cases_for_intent
from reconciliation.casework.selectors import (
    SORTS,
    InvalidFilter,
    QueueFilters,
    case_detail,
    case_evidence,
    queue_ageing,
    queue_counters,
    queue_counts,
    queue_oldest,
    queue_page,
)
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk
from reconciliation.dynamo.client import home_region
from reconciliation.stores import case_store, case_tag, every_store, home_store
from tests.helpers import AS_SYSTEM, acting
from tests.reconciliation.factories import crashed_claim, submit

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.dynamodb_local_only]

HOUR = 3600
STUCK = "STUCK_PENDING"
WHY = {"reason_code": "NEEDS_REVIEW", "reason_text": "A closer look, from either region."}
RELEASE = {
    "reason_code": "CLIENT_CONFIRMED",
    "reason_text": "The client says the request never reached them.",
}
RETRY = {
    "reason_code": "TRANSIENT_FAILURE",
    "reason_text": "The worker died before committing; retry it.",
}
# (home region, age in hours, amount, fund): three cases homed in each region, their
# ages, amounts and funds interleaved so every order alternates between the regions.
SPECS = [
    ("us-east-1", 9, "40.00", "BUILDING"),
    ("eu-west-1", 8, "15.00", "ARTS"),
    ("us-east-1", 7, "90.00", "GENERAL"),
    ("eu-west-1", 6, "65.00", "CLINIC"),
    ("us-east-1", 5, "10.00", "ARTS"),
    ("eu-west-1", 4, "30.00", "GENERAL"),
]


def key_homed(region_name: str, prefix: str) -> str:
    """A client key of tenant acme whose home is ``region_name``."""
    n = 0
    while home_region(claim_pk("acme", OPERATION_CREATE_PLEDGE, f"{prefix}-{n}")).name != (
        region_name
    ):
        n += 1
    return f"{prefix}-{n}"


def open_cases(specs=SPECS, prefix: str = "geo") -> list[str]:
    """One STUCK_PENDING case per spec, homed in its region and opened ``age`` hours
    ago by the sweep over every region, oldest first; their ids in that order."""
    ids = []
    for n, (region, age, amount, fund) in enumerate(specs):
        key = key_homed(region, f"{prefix}{n}")
        with clock.travel(-age * HOUR - 200):
            crashed_claim(key, amount=amount, fund=fund, donor_ref=f"D-{n % 2}")
        with clock.travel(-age * HOUR):
            [case_id] = sweep_all(every_store(), home=home_store).opened
        assert case_tag(case_id) == ("" if region == "us-east-1" else "eu-west-1")
        ids.append(case_id)
    return ids


def replicate() -> None:
    """Copy every item of each region's cases table into the other's, as Global Tables
    would (the counters too: theirs are named for their region)."""
    first, second = every_store()
    for source, target in ((first, second), (second, first)):
        pages = source.client.get_paginator("scan").paginate(TableName=source.tables.cases)
        items = [item for page in pages for item in page["Items"]]
        for item in items:
            target.client.put_item(TableName=target.tables.cases, Item=item)


def all_pages(sort: str, *, limit: int, filters: QueueFilters | None = None) -> list:
    """Every row of the STUCK queue in ``sort`` order, ``limit`` a page, by cursor."""
    filters = filters or QueueFilters(sort=sort)
    rows, cursor = [], None
    for _ in range(20):
        page = queue_page(STUCK, filters=filters, cursor=cursor, limit=limit, stores=every_store())
        rows += page.rows
        cursor = page.next_cursor
        if not cursor:
            return rows
    raise AssertionError("the pages never ended")


def expected(ids: list[str], sort: str) -> list[str]:
    """The case ids in ``sort`` order (the specs: oldest first)."""
    amount = {i: Decimal(s[2]) for i, s in zip(ids, SPECS, strict=True)}
    fund = {i: s[3] for i, s in zip(ids, SPECS, strict=True)}
    order = {
        "oldest": ids,
        "newest": ids[::-1],
        "amount": sorted(ids, key=lambda i: amount[i]),
        "amount_desc": sorted(ids, key=lambda i: -amount[i]),
        "fund": sorted(ids, key=lambda i: (fund[i], i)),
        "fund_desc": sorted(ids, key=lambda i: (fund[i], i), reverse=True),
    }
    return order[sort]


def assert_fund_order(rows, sort: str) -> None:
    funds = [r.fund for r in rows]
    assert funds == sorted(funds, reverse=sort == "fund_desc")


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_queue_pages_list_both_regions_once_in_every_order(two_regions, replicated):
    """Each order, one whole page and two rows a page by cursor: the six cases of both
    regions, each once, in the order's sequence."""
    ids = open_cases()
    if replicated:
        replicate()
    for sort in SORTS:
        whole = queue_page(STUCK, filters=QueueFilters(sort=sort), stores=every_store())
        paged = all_pages(sort, limit=2)
        for rows in (whole.rows, paged):
            got = [r.case_id for r in rows]
            if sort.startswith("fund"):
                # Equal funds may come in either region's order; the funds may not.
                assert sorted(got) == sorted(ids), sort
                assert_fund_order(rows, sort)
            else:
                assert got == expected(ids, sort), sort
        assert whole.next_cursor is None


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_filtered_pages_merge_both_regions(two_regions, replicated):
    """Fund, minimum amount and minimum age filters narrow both regions alike."""
    ids = open_cases()
    if replicated:
        replicate()
    arts = all_pages("oldest", limit=1, filters=QueueFilters(fund="ARTS"))
    assert [r.case_id for r in arts] == [ids[1], ids[4]]
    big = all_pages("amount", limit=1, filters=QueueFilters(min_amount=Decimal(30), sort="amount"))
    assert [r.case_id for r in big] == [ids[5], ids[0], ids[3], ids[2]]
    old = all_pages("newest", limit=2, filters=QueueFilters(min_age_s=6 * HOUR, sort="newest"))
    assert [r.case_id for r in old] == [ids[3], ids[2], ids[1], ids[0]]


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_counts_totals_oldest_and_ageing_sum_both_regions(two_regions, replicated):
    ids = open_cases()
    if replicated:
        replicate()
    stores = every_store()
    counts = queue_counts(stores=stores)
    assert counts[STUCK] == 6
    assert queue_counters(stores=stores)[STUCK].amounts["USD"] == Decimal("250.00")
    # The first region alone holds half of them (what every page used to read).
    assert queue_counts(store=AS_SYSTEM.store)[STUCK] == 3
    assert queue_oldest(counts, stores=stores)[STUCK].case_id == ids[0]
    buckets = dict(queue_ageing(counts, stores=stores)[STUCK])
    assert buckets == {"< 1 h": 0, "1–4 h": 0, "4–24 h": 6, "> 24 h": 0}


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_my_cases_and_resolved_list_both_regions(two_regions, replicated):
    ids = open_cases()
    ada = acting("ada")
    for case_id in ids[:4]:
        case_assign(**ada.on_id(case_id, seen_version=1))
    for n, case_id in enumerate(ids[4:]):
        with clock.travel(n * 60):
            case_dispose(disposition="RETRY_COMMIT", **ada.on_id(case_id, **RETRY, seen_version=1))
    if replicated:
        replicate()
    rows, cursor = [], None
    for _ in range(10):
        page = assigned_page("ada", cursor=cursor, limit=1, stores=every_store())
        rows += page.rows
        if not (cursor := page.next_cursor):
            break
    assert [r.case_id for r in rows] == ids[:4]
    assert {r.queue for r in rows} == {STUCK}
    with clock.travel(300):
        resolved = resolved_page(stores=every_store(), limit=1)
        second = resolved_page(stores=every_store(), limit=1, cursor=resolved.next_cursor)
    assert [r.case_id for r in resolved.rows + second.rows] == [ids[5], ids[4]]
    assert (
        second.next_cursor is None
        or not resolved_page(stores=every_store(), limit=1, cursor=second.next_cursor).rows
    )


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_search_finds_cases_in_the_region_they_live_in(two_regions, replicated):
    """By case id (its region), by the client's key (its home region: one Query per
    tenant) and by donor ref (every region)."""
    ids = open_cases()
    if replicated:
        replicate()
    second_id = ids[1]
    assert case_tag(second_id) == "eu-west-1"
    kwargs = {"tenants": ["acme"], "stores": every_store(), "home": home_store}
    [by_id] = case_search(second_id.lower(), **kwargs)
    assert (by_id.case.case_id, by_id.matched) == (second_id, "case_id")
    key = case_detail(second_id, store=case_store(second_id)).idempotency_key
    [by_key] = case_search(key, **kwargs)
    assert (by_key.case.case_id, by_key.matched, by_key.tenant) == (second_id, "client_key", "acme")
    pk_home = home_store(claim_pk("acme", OPERATION_CREATE_PLEDGE, key))
    assert [c.case_id for c in cases_for_intent(f"acme#{key}", store=pk_home)] == [second_id]
    donors = case_search("D-1", **kwargs)  # the odd specs: all homed in eu-west-1
    assert sorted(f.case.case_id for f in donors) == sorted(ids[1::2])
    donors = case_search("D-0", **kwargs)  # the even specs: all homed in us-east-1
    assert sorted(f.case.case_id for f in donors) == sorted(ids[0::2])


@pytest.mark.parametrize("replicated", [False, True], ids=["alone", "replicated"])
def test_digest_counts_and_lists_both_regions(two_regions, replicated):
    """Override requests waiting and cases past SLA, in both regions, each once."""
    ids = open_cases()
    for case_id in (ids[0], ids[1]):
        override_request(
            override="RELEASE_CLAIM", **acting("ada").on_id(case_id, **RELEASE, seen_version=1)
        )
    if replicated:
        replicate()
    digest = supervisor_digest(stores=every_store(), hours=sla_parse("stuck=5.5"))
    assert digest.waiting_count == 2
    assert [r.case_id for r in digest.waiting] == [ids[0], ids[1]]
    [stuck] = digest.past_sla
    assert stuck.queue == Queue.STUCK_PENDING
    assert (stuck.count, [r.case_id for r in stuck.oldest]) == (2, [ids[2], ids[3]])
    counts = queue_counts(stores=every_store())
    assert (counts[Queue.OVERRIDE_REQUESTED], counts[STUCK]) == (2, 4)


def test_a_cursor_is_bound_to_the_regions_it_was_issued_for(two_regions):
    """A one-region cursor read over two regions, a two-region cursor read over one, and
    a forged one are refused as InvalidFilter (a 400 at the edge), never a crash."""
    open_cases()
    two = queue_page(STUCK, limit=2, stores=every_store())
    one = queue_page(STUCK, limit=1, store=AS_SYSTEM.store)
    assert two.next_cursor and one.next_cursor
    with pytest.raises(InvalidFilter):
        queue_page(STUCK, limit=2, cursor=one.next_cursor, stores=every_store())
    with pytest.raises(InvalidFilter):
        queue_page(STUCK, limit=2, cursor=two.next_cursor, store=AS_SYSTEM.store)
    with pytest.raises(InvalidFilter):
        queue_page(STUCK, limit=2, cursor=two.next_cursor[:-3] + "abc", stores=every_store())
    with pytest.raises(InvalidFilter):
        assigned_page("ada", cursor=two.next_cursor, stores=every_store())


def test_a_page_reads_each_region_once(two_regions):
    """Two regions, nothing filtered: one Query per region for a page."""
    open_cases()
    page = queue_page(STUCK, limit=3, stores=every_store())
    assert page.queries == 2 and len(page.rows) == 3


def test_case_evidence_totals_the_fund_over_every_region(two_regions):
    """The case page's ledger line: the fund's total over both regions' shards, not the
    case region's alone."""
    first_key, second_key = key_homed("us-east-1", "led"), key_homed("eu-west-1", "led")
    submit(first_key, amount="10.00")
    submit(second_key, amount="32.50")
    [case_id] = open_cases([("eu-west-1", 1, "5.00", "GENERAL")], prefix="ledc")
    case = case_detail(case_id, store=case_store(case_id))
    evidence = case_evidence(case, store=case_store(case_id), ledger_stores=every_store())
    assert evidence.ledger is not None
    assert evidence.ledger.pledged_total == Decimal("42.50")
    assert evidence.ledger.pledge_count == 2


@pytest.mark.parametrize("where", ["one region", "two regions"])
def test_more_equal_values_than_a_page_never_stall_the_pages(two_regions, settings, where):
    """Eight cases of one fund and one amount, two a page, in every order: each case
    once and the pages end. A tie bounded the page before (the frontier compared case
    ids DynamoDB does not order by): an empty page whose cursor led to itself."""
    homes = ["us-east-1"] * 8 if where == "one region" else ["us-east-1", "eu-west-1"] * 4
    ids = open_cases([(home, 8 - n, "10.00", "GENERAL") for n, home in enumerate(homes)], "tie")
    if where == "one region":
        settings.DDB_REGIONS = settings.DDB_REGIONS.split(",")[0]
    for sort in SORTS:
        got = [r.case_id for r in all_pages(sort, limit=2)]
        assert sorted(got) == sorted(ids), sort
