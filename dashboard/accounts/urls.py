"""URLs of sign-in and of staff accounts: one's own profile with its second factor, and
the supervisors' list of colleagues (``/accounts/``)."""

from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard.accounts import views
from dashboard.accounts.forms import StaffSignInForm

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(authentication_form=StaffSignInForm),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
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
    path("profile/time-zone/", views.time_zone_view, name="profile-time-zone"),
    path("staff/", views.staff_view, name="staff"),
    path(
        "staff/<str:username>/reset-second-factor/",
        views.second_factor_reset_view,
        name="staff-reset-second-factor",
    ),
]
