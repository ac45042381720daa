from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter

from dashboard.converters import AnyKeyConverter
from dashboard.views import api, drill, ops

register_converter(AnyKeyConverter, "anykey")

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/pledges", api.pledge_create, name="api-pledges"),
    path("api/v1/pledges/<anykey:intent_id>", api.pledge_detail, name="api-pledge"),
    path("audit/", include("dashboard.urls_audit")),
    path("drill/", drill.drill_page, name="drill"),
    path("drill/run", drill.drill_start, name="drill-run"),
    path("", include("dashboard.urls_ui")),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics_view, name="metrics"),
]
