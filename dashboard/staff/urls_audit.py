"""URLs of the audit screens (search, export, downloads)."""

from django.urls import include, path

from dashboard.staff.views import audit

# One export started from the search: ``/audit/exports/<export_id>/…``.
export_urls = [
    path("", audit.audit_export_status, name="audit-export-status"),
    path("download", audit.audit_export_download, name="audit-export-download"),
    path("manifest.json", audit.audit_export_manifest, name="audit-export-manifest"),
]

urlpatterns = [
    path("", audit.audit_search_view, name="audit-search"),
    path("export.csv", audit.audit_export_csv, name="audit-export-csv"),
    path("export.jsonl", audit.audit_export_jsonl, name="audit-export-jsonl"),
    path("exports/", audit.audit_exports, name="audit-exports"),
    path("exports/<str:export_id>/", include(export_urls)),
]
