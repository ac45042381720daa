"""The overview: open cases and the oldest per queue, ageing, pending approvals, and the
latest audit events."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.views.pages import QUEUE_SLUGS, SLUG_FOR_QUEUE, VIEWING_ROLES, render_page
from dashboard.tenancy.disabled_endpoints import disabled_endpoints
from reconciliation.cases.policy import audit_visible_performer
from reconciliation.cases.vocabulary import Queue
from reconciliation.casework.notifications import Digest
from reconciliation.casework.overview import overview_read
from reconciliation.casework.selectors import AGE_BUCKETS, totals_by_currency
from reconciliation.casework.tasks import overview_summary_enqueue
from reconciliation.stores import every_store

EVENTS_SHOWN = 20
DISABLED_SHOWN = 10


@require_safe
@role_required(*VIEWING_ROLES)
def overview(request: StaffRequest) -> HttpResponse:
    own_only = audit_visible_performer(request.role, request.user.get_username())
    # One BatchGetItem per region: the counters (counts and amounts at risk per
    # currency), and the summary of what takes Queries, kept for every viewer; a stale
    # or missing one is shown as it is while a task recomputes it on a worker
    # (reconciliation/casework/overview.py): never computed here.
    read = overview_read(
        stores=every_store(),
        max_age_s=settings.OVERVIEW_SUMMARY_MAX_AGE_S,
        refresh_later=overview_summary_enqueue,
    )
    summary = read.summary
    # The drill's cases are left out of the counts and amounts (the counters keep their
    # share apart) as of every list; the notice links the worklist that shows them.
    drill_left_out = sum(c.drill_count for c in read.counters.values())
    counters = {q: c.without_drill() for q, c in read.counters.items()}
    counts = {q: c.count for q, c in counters.items()}
    ageing = summary.ageing if summary else {}
    aged = {queue: sum(n for _, n in ageing.get(queue, [])) for queue in QUEUE_SLUGS.values()}
    queues = [
        {
            "slug": slug,
            "queue": queue,
            "count": counts.get(queue, 0),
            "oldest": summary.oldest.get(queue) if summary else None,
            "buckets": ageing.get(queue, []),
            "aged": aged[queue],
            "amounts": counters[queue].shown_amounts(),
        }
        for slug, queue in QUEUE_SLUGS.items()
    ]
    context = {
        "at_risk": totals_by_currency(counters),
        "queues": queues,
        "bucket_labels": [label for label, _, _ in AGE_BUCKETS],
        "bucket_totals": _bucket_totals(ageing),
        "largest": max(aged.values(), default=0),
        "approval_count": counts.get(Queue.OVERRIDE_REQUESTED, 0),
        # Needs attention: override requests waiting and cases past their queue's SLA
        # (reconciliation/casework/notifications), from the summary.
        "approvals": summary.digest.waiting if summary else [],
        "attention": _attention(summary.digest) if summary else None,
        "events": summary.events_of(own_only, limit=EVENTS_SHOWN) if summary else [],
        "events_own_only": bool(own_only),
        # No summary yet (a new install): the counters are shown, the rest is on its way.
        "summary_ready": summary is not None,
        "summary_at": summary.computed_at if summary else "",
        "summary_refreshing": read.refreshing,
        "drill_left_out": drill_left_out,
        "drill_url": reverse("worklist") + "?drill=1",
        # Endpoints the dispatcher disabled after a day of failures (docs/webhooks.md).
        "disabled_endpoints": disabled_endpoints(limit=DISABLED_SHOWN),
    }
    return render_page(request, "overview.html", "summary", context)


SLA_ROWS_SHOWN = 3


def _bucket_totals(ageing: dict[str, list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """Open cases of every queue per age bucket, in the buckets' order: the ageing
    table's "All queues" row, one total under each bucket's column."""
    totals = dict.fromkeys((label for label, _, _ in AGE_BUCKETS), 0)
    for buckets in ageing.values():
        for label, n in buckets:
            totals[label] = totals.get(label, 0) + n
    return list(totals.items())


def _attention(digest: Digest) -> dict[str, object]:
    past = [
        {
            "queue": breach.queue,
            "slug": SLUG_FOR_QUEUE[breach.queue],
            "hours": f"{breach.sla_hours.normalize():f}",
            "count": breach.count,
            "oldest": breach.oldest[:SLA_ROWS_SHOWN],
        }
        for breach in digest.past_sla
    ]
    return {"waiting_count": digest.waiting_count, "past_sla": past, "empty": digest.is_empty}
