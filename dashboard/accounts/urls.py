"""URLs of sign-in and of staff accounts: one's own profile with its second factor, and
the supervisors' list of colleagues (``/accounts/``)."""

from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard.accounts import passkeys, views

urlpatterns = [
    path(
        "login/",
        views.StaffLoginView.as_view(),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("login/passkey/", passkeys.sign_in_options, name="login-passkey"),
    path("profile/passkeys/begin/", passkeys.enrol_begin, name="profile-passkey-begin"),
    path("profile/passkeys/complete/", passkeys.enrol_complete, name="profile-passkey-complete"),
    path(
        "profile/passkeys/<int:passkey_id>/rename/",
        views.passkey_rename_view,
        name="profile-passkey-rename",
    ),
    path(
        "profile/passkeys/<int:passkey_id>/remove/",
        views.passkey_remove_view,
        name="profile-passkey-remove",
    ),
    path("profile/", views.profile_view, name="profile"),
    path(
        "profile/authenticator/",
        views.authenticator_confirm_view,
        name="profile-authenticator",
    ),
    path(
        "profile/recovery-codes/",
        views.recovery_codes_view,
        name="profile-recovery-codes",
    ),
    path("profile/password/", views.password_change_view, name="profile-password"),
    path("profile/time-zone/", views.time_zone_view, name="profile-time-zone"),
    path(
        "profile/sessions/end-others/",
        views.sessions_end_others_view,
        name="profile-sessions-end-others",
    ),
    path("staff/", views.staff_view, name="staff"),
    path(
        "staff/<str:username>/reset-second-factor/",
        views.second_factor_reset_view,
        name="staff-reset-second-factor",
    ),
    path(
        "staff/<str:username>/end-sessions/",
        views.staff_sessions_end_view,
        name="staff-end-sessions",
    ),
]
