"""URLs of the staff screens: overview, queues, cases, approvals, the audit screens
(``/audit/``), the drill."""

from django.urls import include, path, register_converter

from dashboard.lib.converters import CaseIdConverter
from dashboard.staff.views import (
    acks,
    approvals,
    bulk,
    cases,
    deliveries,
    drill,
    funds,
    notifications,
    overview,
    pledges,
    queues,
    search,
    worklist,
)

register_converter(CaseIdConverter, "case_id")

# One case and what staff do to it: ``/cases/<case_id>/…``.
case_urls = [
    path("", cases.case_view, name="case"),
    path("evidence/", cases.case_evidence_view, name="case-evidence"),
    path("dispose/", cases.case_dispose_view, name="case-dispose"),
    path("override/", cases.case_override_view, name="case-override"),
    path("assign/", cases.case_assign_view, name="case-assign"),
    path("approve/", approvals.override_approve_view, name="case-approve"),
    path("reject/", approvals.override_reject_view, name="case-reject"),
    path("notes/", cases.case_note_view, name="case-notes"),
]

# The notifications of the signed-in member of staff: ``/notifications/…``.
notification_urls = [
    path("", notifications.notifications_view, name="notifications"),
    path("<int:notification_id>/", notifications.notification_open, name="notification-open"),
    path("read-all/", notifications.notifications_read_all, name="notifications-read-all"),
]

# The worklist and the views saved of it: ``/worklist/…``.
worklist_urls = [
    path("", worklist.worklist_view, name="worklist"),
    path("views/", worklist.saved_view_create, name="saved-view-create"),
    path("views/<int:view_id>/delete/", worklist.saved_view_delete, name="saved-view-delete"),
]

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("queues/resolved/", queues.resolved_view, name="resolved"),
    path("queues/mine/", queues.mine_view, name="mine"),
    path("queues/<str:queue>/", queues.queue_view, name="queue"),
    path("cases/", search.case_search_view, name="case-search"),
    path("cases/bulk/", bulk.cases_bulk_view, name="cases-bulk"),
    path("cases/<case_id:case_id>/", include(case_urls)),
    # The client's key percent-encoded; ``path`` since a key may hold a "/". Links are
    # built by dashboard/staff/links.py · pledge_url, which puts a "." or ".." tenant or
    # key in the query (``pledges/?tenant=…&key=…``): a browser would resolve it away.
    path("pledges/", pledges.pledge_query_view, name="pledge-by-query"),
    path("pledges/<str:tenant>/<path:key>/", pledges.pledge_view, name="pledge"),
    path("requests/rejected/", pledges.rejected_requests_view, name="rejected-requests"),
    path("approvals/", approvals.approvals_view, name="approvals"),
    path("acks/", acks.acks_view, name="acks"),
    path("acks/redeliver/", acks.redeliver_view, name="acks-redeliver"),
    path("acks/<int:endpoint_id>/", deliveries.endpoint_deliveries_view, name="acks-endpoint"),
    path("acks/<int:endpoint_id>/resend/", deliveries.endpoint_resend_view, name="acks-resend"),
    path("notifications/", include(notification_urls)),
    path("audit/", include("dashboard.staff.urls_audit")),
    path("funds/", funds.funds_view, name="funds"),
    path("funds/set/", funds.fund_set_view, name="fund-set"),
    path("drill/", drill.drill_page, name="drill"),
    path("drill/run", drill.drill_start, name="drill-run"),
    path("worklist/", include(worklist_urls)),
]
