"""DynamoDB calls and server time per staff page as the open cases grow: the overview,
the worklist, a queue page, a case page, a pledge page and the audit trail.

    python bench/pages.py [--sizes 1000,20000] [--rounds 10] [--write]

For each size the cases table holds that many open cases spread evenly over the
queues (``bench/open_cases.py``: direct ``BatchWriteItem``s with their counters), and
the audit table 2,000 synthetic events of today and yesterday. Each page is then called
in-process (``RequestFactory``, a signed-in supervisor, no middleware) inside a
``calls.tally()``, as ``Server-Timing`` counts it (``dashboard/server_timing.py``):
round trips the client sent, and the server's whole time for the answer. The overview
is measured as every viewer gets it while its summary is fresh, and while it is stale
(``OVERVIEW_SUMMARY_MAX_AGE_S=0``: never fresh; the view shows the kept one and asks
for a new one, queued to no worker here); beside the pages, the recomputation itself,
which only the worker's task makes (``reconciliation/casework/overview.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from datetime import time as day_time

from _common import machine_line, median, start_engine, write_section

EVENTS = 2_000


class _User:
    """A signed-in supervisor without a database row (the views read the role the role
    check caches)."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_superuser = False
    email = "bench@example.org"
    pk = id = 0

    def __init__(self):
        from reconciliation.actors import Role

        self._pledge_role = Role.SUPERVISOR

    def get_username(self) -> str:
        return "bench"


def _request(path: str):
    from django.contrib.sessions.backends.signed_cookies import SessionStore
    from django.test import RequestFactory
    from django_htmx.middleware import HtmxDetails

    request = RequestFactory().get(path)
    request.user = _User()
    request.session = SessionStore()
    request.htmx = HtmxDetails(request)
    request.correlation_id = "bench"
    return request


def _seed(size: int) -> float:
    from bench.audit_synthetic import synthetic_events
    from bench.open_cases import open_cases_seed
    from reconciliation.audit.repository import AuditRepository
    from reconciliation.cases.vocabulary import QUEUES
    from reconciliation.stores import first_store

    store = first_store()
    started = time.perf_counter()
    open_cases_seed(store.client, store.tables.cases, size // len(QUEUES))
    yesterday = datetime.combine(
        datetime.now(UTC).date() - timedelta(days=1), day_time.min, tzinfo=UTC
    )
    AuditRepository(store).batch_put(list(synthetic_events(EVENTS, start=yesterday, days=2)))
    return time.perf_counter() - started


def _pages() -> dict:
    from dashboard.staff.views.audit import audit_search_view
    from dashboard.staff.views.cases import case_view
    from dashboard.staff.views.overview import overview
    from dashboard.staff.views.pledges import pledge_view
    from dashboard.staff.views.worklist import worklist_view
    from reconciliation.casework.selectors import queue_page
    from reconciliation.stores import every_store

    case_id = queue_page("STUCK_PENDING", limit=1, stores=every_store()).rows[0].case_id
    tenant, key = _pledge()
    return {
        "overview (summary fresh)": lambda: overview(_request("/")),
        "overview (summary stale)": lambda: overview(_request("/")),
        "overview summary, recomputed (worker task)": _summary_recompute,
        "worklist (/worklist/, every queue)": lambda: worklist_view(_request("/worklist/")),
        "queue page (/queues/stuck/)": lambda: _queue(),
        "case page": lambda: case_view(_request(f"/cases/{case_id}/"), case_id),
        "pledge page": lambda: pledge_view(_request(f"/pledges/{tenant}/{key}/"), tenant, key),
        "audit trail (/audit/)": lambda: audit_search_view(_request("/audit/")),
    }


def _summary_recompute() -> None:
    """What ``overview_summary_task`` does on a worker; no page, so no answer."""
    from reconciliation.casework.overview import overview_summary_refresh
    from reconciliation.stores import every_store

    overview_summary_refresh(stores=every_store())


def _pledge() -> tuple[str, str]:
    """A pledge recorded through the intake service (the seeded cases have none), once:
    its tenant and key, for the pledge page."""
    from reconciliation.actors import Actor, Role
    from reconciliation.claims import intake
    from reconciliation.claims.models import pledge_home
    from reconciliation.claims.request import parse_fields

    tenant, key = "acme", "bench-pledge-1"
    intake.pledge_submit(
        pledge_home(tenant, key),
        tenant=tenant,
        idempotency_key=key,
        request=parse_fields(
            {"donor_ref": "D-1", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}
        ),
        actor=Actor(username=f"api:{tenant}", role=Role.API, address="127.0.0.1"),
    )
    return tenant, key


def _queue():
    from dashboard.staff.views.queues import queue_view

    return queue_view(_request("/queues/stuck/"), "stuck")


def measure(rounds: int) -> dict[str, tuple[int, float]]:
    """Per page: the median round trips and the median server time (ms)."""
    from django.test import override_settings

    from reconciliation.casework import tasks
    from reconciliation.casework.overview import overview_summary_refresh
    from reconciliation.dynamo import calls
    from reconciliation.stores import every_store

    # A stale view's ask goes to no broker: no worker runs here.
    tasks.overview_summary_task.apply_async = lambda *_a, **_k: None  # type: ignore[method-assign]
    out = {}
    for name, call in _pages().items():
        max_age = 0 if "stale" in name else 3600
        if name.startswith("overview ("):
            # As the worker leaves it after the seeding moved the counts: without it the
            # views find none (or a stale one) and show the counters alone.
            overview_summary_refresh(stores=every_store())
        trips, times = [], []
        with override_settings(OVERVIEW_SUMMARY_MAX_AGE_S=max_age):
            call()  # warm-up (and, stale, the one view that asks for a new summary)
            for _ in range(rounds):
                with calls.tally() as counted:
                    started = time.perf_counter()
                    response = call()
                    elapsed = time.perf_counter() - started
                assert response is None or response.status_code == 200, name
                trips.append(counted.round_trips)
                times.append(elapsed * 1000)
        out[name] = (int(median(trips)), median(times))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,20000")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[int, dict] = {}
    seeded: dict[int, float] = {}
    # The case page lists the staff a case may be assigned to: a database of its own.
    folder = tempfile.mkdtemp(prefix="bench-pages-")
    os.environ["DATABASE_URL"] = f"sqlite:///{folder}/db.sqlite3"
    engine = start_engine()
    try:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        written = 0
        for size in sizes:
            # Each size adds to the one before: the cases written so far stay.
            seeded[size] = _seed(size) if size > written else 0.0
            written = size
            results[size] = measure(args.rounds)
            print(f"{size} open cases (seeded in {seeded[size]:.0f} s):", flush=True)
            for name, (trips, ms) in results[size].items():
                print(f"  {name:<38} {trips:>4} calls {ms:>8.1f} ms", flush=True)
    finally:
        engine.stop()
        shutil.rmtree(folder, ignore_errors=True)
    if args.write:
        header = " | ".join(f"{s:,} open: calls | {s:,} open: ms" for s in sizes)
        lines = [
            "## Staff pages: DynamoDB calls and server time (`bench/pages.py`)",
            "",
            f"{machine_line()}; DynamoDB Local in memory, {args.rounds} rounds per page "
            f"after a warm-up, medians; {EVENTS:,} audit events of today and yesterday. Open "
            "cases spread evenly over the eight queues, ages one minute to two days; "
            "seeded with direct writes ("
            + ", ".join(f"{s:,} in {seeded[s]:.0f} s" for s in sizes)
            + "). Calls are the round trips `Server-Timing` counts (pool threads included).",
            "",
            f"| page | {header} |",
            "| --- |" + " ---: | ---: |" * len(sizes),
        ]
        for name in results[sizes[0]]:
            cells = " | ".join(f"{results[s][name][0]} | {results[s][name][1]:.0f}" for s in sizes)
            lines.append(f"| {name} | {cells} |")
        write_section("pages", "\n".join(lines))


if __name__ == "__main__":
    main()
