"""The overview: open cases and the oldest per queue, the ageing chart, pending override
requests and the latest audit events; as a page and as the htmx refresh fragment."""

from __future__ import annotations

import re

import pytest

from reconciliation import clock
from reconciliation.casework.overrides import override_request
from reconciliation.casework.selectors import case_timeline, recent_audit_events
from tests.helpers import AS_SYSTEM, acting, overview_get, sign_in
from tests.reconciliation.factories import key_reuse_case, stuck_case

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("midday")]

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.mark.engines("moto")
def test_overview_page_and_fragment(ddb, supervisor_client):
    """Counts and oldest case per queue, the ageing chart as SVG bars with the numbers
    beside them, and the latest events; htmx gets the #overview fragment."""
    with clock.travel(-2 * 3600):
        old = stuck_case("ov-1")
    stuck_case("ov-2")
    key_reuse_case(ddb, "ov-3")
    page = overview_get(supervisor_client)
    html = page.content.decode()
    assert page.status_code == 200 and "<!doctype html>" in html
    assert "HX-Request" in page["Vary"]
    row = re.search(r'<a href="/queues/stuck/">Stuck claims</a></th>\s*<td class="num">(\d+)', html)
    assert row.group(1) == "2"
    assert f'<a href="/cases/{old.case_id}/" title="opened' in html  # the oldest, linked
    ageing = html[html.index('<table class="ageing">') :]
    stuck_row = re.search(r"<th scope=\"row\">Stuck claims</th>(.*?)</tr>", ageing, re.S).group(1)
    assert re.findall(r'<td class="num">(\d+)</td>', stuck_row) == ["1", "1", "0", "0"]
    assert (
        'role="img" aria-label="Stuck claims: 1 &lt; 1 h, 1 1–4 h, 0 4–24 h, 0 &gt; 24 h"' in html
    )
    assert "style=" not in html  # the CSP forbids inline styles: bars are SVG attributes
    assert "Latest audit events" in html and "Case opened" in html
    fragment = supervisor_client.get("/", **HX).content.decode()
    assert fragment.lstrip().startswith('<div id="overview"') and "<html" not in fragment


@pytest.mark.engines("moto")
def test_overview_lists_pending_override_requests(ddb, client):
    """Pending override requests appear with their count, requester and expiry; the
    link goes to the approvals page for supervisors, to the queue for others."""
    case = stuck_case("ov-4")
    override_request(
        override="RELEASE_CLAIM",
        **acting("ada").on(
            case,
            reason_code="CLIENT_CONFIRMED",
            reason_text="The client wants to retry.",
            action_id="r",
        ),
    )
    sign_in(client, "supervisor")
    html = overview_get(client).content.decode()
    assert 'awaiting approval <span class="badge warn">1</span>' in html
    assert "Release the claim (client may retry)" in html and "by ada" in html
    assert 'href="/approvals/">Decide them on the Approvals page' in html
    client.logout()
    sign_in(client, "auditor")
    html = client.get("/").content.decode()
    assert 'href="/queues/approval/">See the Awaiting approval queue' in html


def test_recent_audit_events_newest_first_across_two_days(ddb):
    """The overview's event list is the newest N of today and yesterday, newest first,
    read by Query from the day shards (yesterday's events included)."""
    with clock.travel(-86400):
        stuck_case("ov-yesterday")
    for n in range(3):
        stuck_case(f"ov-today-{n}")
    events = recent_audit_events(limit=50, stores=[AS_SYSTEM.store])
    stamps = [e["at"] for e in events]
    assert stamps == sorted(stamps, reverse=True)
    assert any(e.get("intent_id") == "acme#ov-yesterday" for e in events)
    assert len(recent_audit_events(limit=2, stores=[AS_SYSTEM.store])) == 2
    assert recent_audit_events(limit=2, stores=[AS_SYSTEM.store])[0]["at"] == stamps[0]


def test_case_timeline_is_the_case_stream(ddb):
    """The timeline selector returns the case's own stream in seq order."""
    case = stuck_case("ov-5")
    events = case_timeline(case.case_id, store=AS_SYSTEM.store)
    assert [e["seq"] for e in events] == [1]
    assert events[0]["action"] == "case_opened" and events[0]["stream"] == f"CASE#{case.case_id}"


def test_screen_reader_only_text_is_hidden_by_the_stylesheet():
    """Labels meant for screen readers only (the chart column's header, the export
    format's label) use a class the stylesheet really hides."""
    from django.conf import settings

    css = (settings.BASE_DIR / "static/css/app.css").read_text()
    templates = [
        (settings.BASE_DIR / "dashboard/staff/templates" / name).read_text()
        for name in ("overview.html", "audit/search.html")
    ]
    assert all('class="visually-hidden"' in t for t in templates)
    rule = re.search(r"\.visually-hidden\s*\{([^}]*)\}", css)
    assert rule and "position: absolute" in rule.group(1) and "clip:" in rule.group(1)


def test_empty_queues_cost_no_query(ddb, monkeypatch):
    """The overview asks the index only about queues whose counter holds open cases; an
    empty queue shows no oldest case and zero in every age bucket."""
    from reconciliation.cases.repository import CaseRepository
    from reconciliation.casework.selectors import queue_ageing, queue_counts, queue_oldest

    stuck_case("ov-only")
    asked: list[str] = []
    for method in ("query_queue", "count_range"):
        real = getattr(CaseRepository, method)

        def spy(self, queue, *args, _real=real, **kwargs):
            asked.append(queue)
            return _real(self, queue, *args, **kwargs)

        monkeypatch.setattr(CaseRepository, method, spy)
    counts = queue_counts(store=AS_SYSTEM.store)
    oldest, ageing = (
        queue_oldest(counts, store=AS_SYSTEM.store),
        queue_ageing(counts, store=AS_SYSTEM.store),
    )
    assert set(asked) == {"STUCK_PENDING"}
    assert oldest["STUCK_PENDING"] is not None and oldest["ESCALATED"] is None
    assert sum(n for _, n in ageing["STUCK_PENDING"]) == 1
    assert [n for _, n in ageing["TOKEN_MISMATCH"]] == [0, 0, 0, 0]


@pytest.mark.engines("moto")
@pytest.mark.parametrize(
    ("role", "sees_others"),
    [("finance_staff", False), ("supervisor", True), ("auditor", True)],
)
def test_overview_events_follow_the_audit_page_visibility_rule(ddb, client, role, sees_others):
    """The overview's latest events apply the audit page's rule: finance staff see only
    their own events, supervisors and auditors everyone's."""
    from reconciliation.casework.dispositions import case_assign

    mine, theirs = stuck_case("ov-vis-1"), stuck_case("ov-vis-2")
    if role != "auditor":  # auditors take no action, so have no events of their own
        case_assign(**acting("viewer", role).on(mine, seen_version=1))
    case_assign(**acting("ben").on(theirs, seen_version=1))
    sign_in(client, role, username="viewer")
    html = overview_get(client).content.decode()
    events = html[html.index('<table class="events">') :]
    assert ("ben <span" in events) is sees_others
    assert ("system <span" in events) is sees_others
    if role != "auditor":
        assert "viewer <span" in events
    assert ("Your own actions only." in html) is not sees_others


def test_head_is_answered_like_get_and_pages_name_their_icon(ddb, staff_client):
    """HEAD / answers 200 as GET does (monitors and link checkers ask with HEAD; a 405
    reads as the site being down), and every page links the site icon."""
    assert staff_client.head("/").status_code == 200
    page = staff_client.get("/").content.decode()
    assert re.search(r'<link rel="icon" href="/static/favicon[^"]*\.svg"', page)


@pytest.mark.engines("moto")
def test_consecutive_checkpoints_are_one_row_on_the_overview(ddb, supervisor_client):
    """A quiet trail's signed checkpoints (14-20 of the 20 latest events on a fresh
    install) are one row per run ("12 signed checkpoints, from – to"), so the events
    people made stay in view."""
    from reconciliation.actors import system_actor
    from reconciliation.audit.append import audit_event_append
    from reconciliation.audit.models import SYSTEM_STREAM, AuditAction, AuditEvent

    def checkpoints(n: int) -> None:
        for _ in range(n):
            audit_event_append(
                AS_SYSTEM.store,
                stream=SYSTEM_STREAM,
                event=AuditEvent(action=AuditAction.AUDIT_CHECKPOINT, actor=system_actor()),
            )

    with clock.travel(-3 * 3600):
        stuck_case("ov-cp-1")
    with clock.travel(-2 * 3600):
        checkpoints(12)
    with clock.travel(-3600):
        stuck_case("ov-cp-2")
        checkpoints(25)
    html = overview_get(supervisor_client).content.decode()
    events = html[html.index('<table class="events">') :]
    rows = re.findall(r"<tr[ >].*?</tr>", events[events.index("<tbody>") :], re.S)
    assert "Signed checkpoint" not in events
    collapsed = [r for r in rows if "signed checkpoints" in r]
    assert [re.search(r"(\d+) signed checkpoints", r).group(1) for r in collapsed] == ["25", "12"]
    assert events.count("Case opened") == 2  # both real events in view
    assert len(rows) == 4


class _Asks:
    """The overview's refresh tasks queued, counted here instead of run (tests run
    Celery eagerly: the task would compute the summary inside the view's request)."""

    def __init__(self, monkeypatch):
        from reconciliation.casework import tasks

        self.queued = 0
        monkeypatch.setattr(tasks.overview_summary_task, "apply_async", self._queued)

    def _queued(self, *_args, **_kwargs):
        self.queued += 1


@pytest.mark.engines("moto")
def test_overview_without_a_summary_shows_the_counters_and_asks_once(
    ddb, supervisor_client, monkeypatch
):
    """A new install's overview, before any worker kept a summary, shows the live counts
    and amounts, says the oldest, ageing, attention and events are being computed, and
    queues one recomputation however many views find none."""
    asks = _Asks(monkeypatch)
    stuck_case("ov-new-1")
    stuck_case("ov-new-2")
    for _ in range(3):
        html = supervisor_client.get("/").content.decode()
        row = re.search(
            r'<a href="/queues/stuck/">Stuck claims</a></th>\s*<td class="num">(\d+)', html
        )
        assert row.group(1) == "2"
        assert "are being computed: press Refresh in a moment" in html
        assert '<table class="ageing">' not in html and '<table class="events">' not in html
        assert "Nothing: no override request is waiting" not in html  # not known yet
    assert asks.queued == 1


@pytest.mark.engines("moto")
def test_a_stale_summary_is_shown_with_its_age_and_asked_for_once(
    ddb, supervisor_client, monkeypatch
):
    """A summary a worker kept 3 minutes ago, older than the 30 s it stays fresh, is
    shown as it is, "as of 3 min ago", marked as being brought up to date; the views
    that find it stale queue one recomputation between them."""
    from reconciliation.casework.overview import overview_summary_refresh
    from reconciliation.stores import every_store

    with clock.travel(-180):
        old = stuck_case("ov-stale-1")
        overview_summary_refresh(stores=every_store())
    asks = _Asks(monkeypatch)
    for _ in range(3):
        html = supervisor_client.get("/").content.decode()
        age = html[html.index('class="muted summary-age"') :]
        assert re.match(r'class="muted summary-age">[^<]* as of <time [^>]*>3 min ago</time>', age)
        assert "being brought up to date" in age
        assert f'<a href="/cases/{old.case_id}/" title="opened' in html  # the kept oldest
    assert asks.queued == 1
