"""The project's URLs: each face of it brings its own (``/accounts/``, ``/api/v1/``, the
staff pages at the root), beside the admin and the machine endpoints."""

from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic.base import RedirectView

from dashboard.api import ops
from dashboard.tenancy import admin

urlpatterns = [
    path("accounts/", include("dashboard.accounts.urls")),
    # Tokens, tenants, funds and webhook endpoints were administered under the project's
    # own label; a bookmark or a runbook link to the old address still arrives.
    re_path(
        r"^admin/dashboard/(?P<rest>(?:apitoken|tenant|fund|webhookendpoint|deliveryattempt)/.*)$",
        RedirectView.as_view(url="/admin/tenancy/%(rest)s", permanent=True, query_string=True),
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("dashboard.api.urls")),
    path("", include("dashboard.staff.urls")),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics_view, name="metrics"),
    # Asked for by browsers and monitors whatever the pages link.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
]

# Error pages in the layout, JSON on the machine paths (dashboard/lib/errors.py).
handler400 = "dashboard.lib.errors.bad_request"
handler403 = "dashboard.lib.errors.permission_denied"
handler404 = "dashboard.lib.errors.page_not_found"
handler500 = "dashboard.lib.errors.server_error"
