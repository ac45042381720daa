"""URLs of sign-in and of staff accounts: one's own profile with its second factor, and
the supervisors' list of colleagues (``/accounts/``)."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from dashboard.accounts import passkeys, views

# A passkey of one's own, by its id: ``/accounts/profile/passkeys/<id>/…``.
passkey_urls = [
    path("rename/", views.passkey_rename_view, name="profile-passkey-rename"),
    path("remove/", views.passkey_remove_view, name="profile-passkey-remove"),
]

# One's own profile: ``/accounts/profile/…``.
profile_urls: list[URLPattern | URLResolver] = [
    path("", views.profile_view, name="profile"),
    path("passkeys/begin/", passkeys.enrol_begin, name="profile-passkey-begin"),
    path("passkeys/complete/", passkeys.enrol_complete, name="profile-passkey-complete"),
    path("passkeys/<int:passkey_id>/", include(passkey_urls)),
    path("authenticator/", views.authenticator_confirm_view, name="profile-authenticator"),
    path("recovery-codes/", views.recovery_codes_view, name="profile-recovery-codes"),
    path("password/", views.password_change_view, name="profile-password"),
    path("time-zone/", views.time_zone_view, name="profile-time-zone"),
    path(
        "sessions/end-others/",
        views.sessions_end_others_view,
        name="profile-sessions-end-others",
    ),
]

# A colleague's account, as a supervisor acts on it: ``/accounts/staff/<username>/…``.
staff_account_urls = [
    path("reset-second-factor/", views.second_factor_reset_view, name="staff-reset-second-factor"),
    path("end-sessions/", views.staff_sessions_end_view, name="staff-end-sessions"),
]

urlpatterns = [
    path("login/", views.StaffLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("login/passkey/", passkeys.sign_in_options, name="login-passkey"),
    path("profile/", include(profile_urls)),
    path("staff/", views.staff_view, name="staff"),
    path("staff/<str:username>/", include(staff_account_urls)),
]
