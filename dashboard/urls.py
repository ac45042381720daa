from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter

from dashboard import admin, ops
from dashboard.accounts import views as accounts
from dashboard.api import views as api
from dashboard.converters import AnyKeyConverter
from dashboard.staff.forms import StaffSignInForm
from dashboard.staff.views import drill

register_converter(AnyKeyConverter, "anykey")

urlpatterns = [
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=StaffSignInForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/profile/", accounts.profile_view, name="profile"),
    path(
        "accounts/profile/authenticator/",
        accounts.authenticator_confirm_view,
        name="profile-authenticator",
    ),
    path(
        "accounts/profile/recovery-codes/",
        accounts.recovery_codes_view,
        name="profile-recovery-codes",
    ),
    path("accounts/profile/time-zone/", accounts.time_zone_view, name="profile-time-zone"),
    path("accounts/staff/", accounts.staff_view, name="staff"),
    path(
        "accounts/staff/<str:username>/reset-second-factor/",
        accounts.second_factor_reset_view,
        name="staff-reset-second-factor",
    ),
    path("admin/", admin.site.urls),
    path("api/v1/pledges", api.pledge_create, name="api-pledges"),
    path("api/v1/pledges/<anykey:intent_id>", api.pledge_detail, name="api-pledge"),
    path("audit/", include("dashboard.staff.urls_audit")),
    path("drill/", drill.drill_page, name="drill"),
    path("drill/run", drill.drill_start, name="drill-run"),
    path("", include("dashboard.staff.urls")),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics_view, name="metrics"),
]

# Error pages in the layout, JSON on the machine paths (dashboard/errors.py).
handler400 = "dashboard.errors.bad_request"
handler403 = "dashboard.errors.permission_denied"
handler404 = "dashboard.errors.page_not_found"
handler500 = "dashboard.errors.server_error"
