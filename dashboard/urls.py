from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter

from dashboard import admin, passkeys
from dashboard.converters import AnyKeyConverter
from dashboard.forms import StaffSignInForm
from dashboard.views import accounts, api, drill, ops

register_converter(AnyKeyConverter, "anykey")

urlpatterns = [
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=StaffSignInForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/login/passkey/", passkeys.sign_in_options, name="login-passkey"),
    path("accounts/profile/passkeys/begin/", passkeys.enrol_begin, name="profile-passkey-begin"),
    path(
        "accounts/profile/passkeys/complete/",
        passkeys.enrol_complete,
        name="profile-passkey-complete",
    ),
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
    path(
        "accounts/profile/sessions/end-others/",
        accounts.sessions_end_others_view,
        name="profile-sessions-end-others",
    ),
    path("accounts/staff/", accounts.staff_view, name="staff"),
    path(
        "accounts/staff/<str:username>/reset-second-factor/",
        accounts.second_factor_reset_view,
        name="staff-reset-second-factor",
    ),
    path(
        "accounts/staff/<str:username>/end-sessions/",
        accounts.staff_sessions_end_view,
        name="staff-end-sessions",
    ),
    path("admin/", admin.site.urls),
    path("api/v1/pledges", api.pledge_create, name="api-pledges"),
    path("api/v1/pledges/<anykey:intent_id>", api.pledge_detail, name="api-pledge"),
    path("audit/", include("dashboard.urls_audit")),
    path("drill/", drill.drill_page, name="drill"),
    path("drill/run", drill.drill_start, name="drill-run"),
    path("", include("dashboard.urls_ui")),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics_view, name="metrics"),
]

# Error pages in the layout, JSON on the machine paths (dashboard/views/errors.py).
handler400 = "dashboard.views.errors.bad_request"
handler403 = "dashboard.views.errors.permission_denied"
handler404 = "dashboard.views.errors.page_not_found"
handler500 = "dashboard.views.errors.server_error"
