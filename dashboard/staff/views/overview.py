"""The overview: open cases and the oldest per queue, ageing, pending approvals, and the
latest audit events."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.views.pages import QUEUE_SLUGS, SLUG_FOR_QUEUE, VIEWING_ROLES, render_page
from reconciliation.cases.models import Queue
from reconciliation.cases.policy import audit_visible_performer
from reconciliation.casework.notifications import Digest, supervisor_digest
from reconciliation.casework.selectors import (
    AGE_BUCKETS,
    queue_ageing,
    queue_counters,
    queue_oldest,
    recent_audit_events,
    totals_by_currency,
)
from reconciliation.stores import every_store

APPROVALS_SHOWN = 5
EVENTS_SHOWN = 20


@require_safe
@role_required(*VIEWING_ROLES)
def overview(request: StaffRequest) -> HttpResponse:
    own_only = audit_visible_performer(request.role, request.user.get_username())
    stores = every_store()  # resolved once for the page's reads: every region, merged
    # One BatchGetItem of counter items per region: counts and amounts at risk per currency.
    counters = queue_counters(stores=stores)
    counts = {q: c.count for q, c in counters.items()}
    oldest = queue_oldest(counts, stores=stores)
    ageing = queue_ageing(counts, stores=stores)
    aged = {queue: sum(n for _, n in ageing.get(queue, [])) for queue in QUEUE_SLUGS.values()}
    queues = [
        {
            "slug": slug,
            "queue": queue,
            "count": counts.get(queue, 0),
            "oldest": oldest.get(queue),
            "buckets": ageing.get(queue, []),
            "aged": aged[queue],
            "amounts": counters[queue].shown_amounts(),
        }
        for slug, queue in QUEUE_SLUGS.items()
    ]
    # Needs attention: override requests waiting and cases past their queue's SLA, from
    # the counters above, one approval page, and per non-empty queue a COUNT and a
    # short Query of the range older than its SLA (reconciliation/casework/notifications).
    attention = supervisor_digest(stores=stores, counts=counts, rows=APPROVALS_SHOWN)
    context = {
        "at_risk": totals_by_currency(counters),
        "queues": queues,
        "bucket_labels": [label for label, _, _ in AGE_BUCKETS],
        "largest": max(aged.values(), default=0),
        "approval_count": counts.get(Queue.OVERRIDE_REQUESTED, 0),
        "approvals": attention.waiting,
        "attention": _attention(attention),
        "events": recent_audit_events(limit=EVENTS_SHOWN, performed_by=own_only, stores=stores),
        "events_own_only": bool(own_only),
    }
    return render_page(request, "overview.html", "summary", context)


SLA_ROWS_SHOWN = 3


def _attention(digest: Digest) -> dict:
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
