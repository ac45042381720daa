from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard.views import ops

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics_view, name="metrics"),
]
