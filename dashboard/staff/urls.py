"""URLs of the staff screens: overview, queues, cases, approvals, the audit screens
(``/audit/``), the drill."""

from django.urls import include, path, register_converter

from dashboard.converters import CaseIdConverter
from dashboard.staff.views import (
    approvals,
    bulk,
    cases,
    drill,
    notifications,
    overview,
    queues,
    search,
    worklist,
)

register_converter(CaseIdConverter, "case_id")

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("queues/resolved/", queues.resolved_view, name="resolved"),
    path("queues/mine/", queues.mine_view, name="mine"),
    path("queues/<str:queue>/", queues.queue_view, name="queue"),
    path("cases/", search.case_search_view, name="case-search"),
    path("cases/bulk/", bulk.cases_bulk_view, name="cases-bulk"),
    path("cases/<case_id:case_id>/", cases.case_view, name="case"),
    path("cases/<case_id:case_id>/evidence/", cases.case_evidence_view, name="case-evidence"),
    path("cases/<case_id:case_id>/dispose/", cases.case_dispose_view, name="case-dispose"),
    path("cases/<case_id:case_id>/override/", cases.case_override_view, name="case-override"),
    path("cases/<case_id:case_id>/assign/", cases.case_assign_view, name="case-assign"),
    path("cases/<case_id:case_id>/approve/", approvals.override_approve_view, name="case-approve"),
    path("cases/<case_id:case_id>/reject/", approvals.override_reject_view, name="case-reject"),
    path("cases/<case_id:case_id>/notes/", cases.case_note_view, name="case-notes"),
    path("approvals/", approvals.approvals_view, name="approvals"),
    path("notifications/", notifications.notifications_view, name="notifications"),
    path(
        "notifications/<int:notification_id>/",
        notifications.notification_open,
        name="notification-open",
    ),
    path(
        "notifications/read-all/",
        notifications.notifications_read_all,
        name="notifications-read-all",
    ),
    path("audit/", include("dashboard.staff.urls_audit")),
    path("drill/", drill.drill_page, name="drill"),
    path("drill/run", drill.drill_start, name="drill-run"),
    path("worklist/", worklist.worklist_view, name="worklist"),
    path("worklist/views/", worklist.saved_view_create, name="saved-view-create"),
    path(
        "worklist/views/<int:view_id>/delete/",
        worklist.saved_view_delete,
        name="saved-view-delete",
    ),
]
