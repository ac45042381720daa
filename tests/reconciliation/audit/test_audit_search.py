"""Search over ``by_day``: merged order across shards and days, cursor paging that
neither skips nor repeats, filters, and cursors that cannot be forged."""

from __future__ import annotations

import pytest

from reconciliation import clock
from reconciliation.audit.day_index import CursorError, DayIndexReader, decode_event
from reconciliation.audit.filters import AuditFilters, FilterAsk, FilterError
from reconciliation.audit.search import audit_search
from reconciliation.dynamo.items import from_item
from tests.helpers import AS_SYSTEM, audit_seed, repositories

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("midday")]


def seed(total: int, *, days: int = 3, tag: str = "") -> list[dict]:
    """Three days of events unless told otherwise."""
    return audit_seed(total, days=days, tag=tag)


def first_day(events: list[dict]) -> str:
    return min(e["at"] for e in events)[:10]


def all_pages(filters: AuditFilters, page_size: int) -> tuple[list[str], int]:
    seen: list[str] = []
    cursor, pages = None, 0
    while True:
        page = audit_search(
            filters=filters,
            cursor=cursor,
            page_size=page_size,
            with_chains=False,
            store=AS_SYSTEM.store,
        )
        seen.extend(r.event_id for r in page.rows)
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            return seen, pages


def test_pages_cover_every_event_newest_first_exactly_once(ddb):
    """Paging by cursor over three days returns every event once, newest first, and
    each page reads the index with Queries only."""
    events = seed(400)
    scans: list[str] = []
    ddb.client.meta.events.register("before-call.dynamodb.Scan", lambda **kw: scans.append(1))
    filters = AuditFilters.build(
        FilterAsk(since=first_day(events), until=clock.now().date().isoformat())
    )
    seen, pages = all_pages(filters, 60)
    newest_first = [e["event_id"] for e in sorted(events, key=lambda e: e["at_id"], reverse=True)]
    assert seen == newest_first
    assert pages >= 7 and scans == []


def test_filters_select_by_actor_action_case_and_intent(ddb):
    """Each filter returns exactly the matching events, across pages."""
    events = seed(300)
    since = first_day(events)
    case_event = next(e for e in events if e.get("case_id"))
    cases = [
        ({"actor": "sam"}, lambda e: e["actor"]["username"] == "sam"),
        ({"actor": "ben@example.org"}, lambda e: e["actor"]["email"] == "ben@example.org"),
        ({"action": "pledge_recorded"}, lambda e: e["action"] == "pledge_recorded"),
        ({"case_id": case_event["case_id"]}, lambda e: e.get("case_id") == case_event["case_id"]),
        (
            {"intent_id": case_event["intent_id"], "actor": "sam"},
            lambda e: (
                e.get("intent_id") == case_event["intent_id"] and e["actor"]["username"] == "sam"
            ),
        ),
        ({"performed_by": "ada"}, lambda e: e["actor"]["username"] == "ada"),
    ]
    for given, match in cases:
        asked = {k: v for k, v in given.items() if k != "performed_by"}
        filters = AuditFilters.build(
            FilterAsk(since=since, **asked), performed_by=given.get("performed_by", "")
        )
        seen, _ = all_pages(filters, 25)
        expected = [e["event_id"] for e in events if match(e)]
        assert sorted(seen) == sorted(expected), given
    assert any(all_pages(AuditFilters.build(FilterAsk(since=since, actor="sam")), 25)[0])


def test_time_bounds_are_inclusive_to_the_microsecond(ddb):
    """ISO date-time bounds keep events at exactly ``since`` and ``until``."""
    events = sorted(seed(120, days=1), key=lambda e: e["at_id"])
    low, high = events[10], events[90]
    filters = AuditFilters.build(FilterAsk(since=low["at"], until=high["at"]), max_days=None)
    seen = [item["event_id"]["S"] for item in DayIndexReader(repositories().audit, filters)]
    assert seen == [e["event_id"] for e in events[10:91]]


def test_sparse_search_stops_on_its_budget_and_resumes(ddb, monkeypatch):
    """A filter that matches nothing in most days ends a page on its query budget with a
    cursor; following the cursors still finds the one match and then ends."""
    monkeypatch.setattr("reconciliation.audit.search.SEARCH_QUERY_BUDGET", 12)
    events = seed(200, days=3)
    target = next(e for e in events if e.get("case_id"))
    filters = AuditFilters.build(FilterAsk(since=first_day(events), case_id=target["case_id"]))
    first = audit_search(filters=filters, with_chains=False, store=AS_SYSTEM.store)
    assert first.next_cursor and first.searched_to is not None
    seen, pages = all_pages(filters, 50)
    expected = [e["event_id"] for e in events if e.get("case_id") == target["case_id"]]
    assert pages > 1 and expected
    assert sorted(seen) == sorted(expected)


def test_forged_or_foreign_cursor_is_refused(ddb):
    """A cursor edited by hand, or taken from a search with other filters, is refused."""
    events = seed(120)
    since = first_day(events)
    filters = AuditFilters.build(FilterAsk(since=since))
    page = audit_search(filters=filters, page_size=10, with_chains=False, store=AS_SYSTEM.store)
    with pytest.raises(CursorError):
        audit_search(
            filters=AuditFilters.build(FilterAsk(since=since, actor="sam")),
            cursor=page.next_cursor,
            store=AS_SYSTEM.store,
        )
    with pytest.raises(CursorError):
        audit_search(filters=filters, cursor=page.next_cursor[:-4] + "AAAA", store=AS_SYSTEM.store)
    with pytest.raises(CursorError):
        audit_search(filters=filters, cursor="not-a-cursor", store=AS_SYSTEM.store)


def test_filter_validation_names_the_problem():
    """Bad dates, reversed ranges and overlong ranges are refused with a reason."""
    with pytest.raises(FilterError, match="not a date"):
        AuditFilters.build(FilterAsk(since="yesterday"))
    with pytest.raises(FilterError, match="starts after it ends"):
        AuditFilters.build(FilterAsk(since="2026-02-02", until="2026-02-01"))
    with pytest.raises(FilterError, match="at most 366"):
        AuditFilters.build(FilterAsk(since="2020-01-01", until="2026-01-01"))
    with pytest.raises(FilterError, match="no time zone"):
        AuditFilters.build(FilterAsk(since="2026-01-01T10:00:00", until="2026-01-02"))


def test_fast_decoding_matches_boto3(ddb):
    """The export's attribute decoder returns exactly what ``from_item`` returns."""
    events = seed(40, days=1)
    filters = AuditFilters.build(FilterAsk(since=first_day(events)))
    for item in DayIndexReader(repositories().audit, filters):
        assert decode_event(item) == from_item(item)


def test_chain_status_of_the_streams_shown(ddb):
    """Search results carry the chain status of each stream displayed; a tampered
    event marks its stream broken and names the seq."""
    events = seed(60, days=1)
    victim = events[0]
    ddb.client.update_item(
        TableName=ddb.tables.audit_events,
        Key={"stream": {"S": victim["stream"]}, "seq": {"N": "1"}},
        UpdateExpression="SET #a = :a",
        ExpressionAttributeNames={"#a": "action"},
        ExpressionAttributeValues={":a": {"S": "case_deleted"}},
    )
    page = audit_search(
        filters=AuditFilters.build(FilterAsk(since=first_day(events))),
        page_size=100,
        store=AS_SYSTEM.store,
    )
    assert set(page.chains) == {e["stream"] for e in events}
    assert [c.stream for c in page.broken] == [victim["stream"]]
    assert page.broken[0].seq == 1 and page.broken[0].problem == "hash mismatch"
    flags = {r.stream: r.chain_ok for r in page.rows}
    assert flags[victim["stream"]] is False
    assert sum(1 for ok in flags.values() if ok) == len(flags) - 1
