"""URLs of the public intake API (``/api/v1/``, docs/design.md §11)."""

from django.urls import path, register_converter

from dashboard.api import views
from dashboard.lib.converters import AnyKeyConverter

register_converter(AnyKeyConverter, "anykey")

urlpatterns = [
    path("pledges", views.pledge_create, name="api-pledges"),
    path("pledges/<anykey:intent_id>", views.pledge_detail, name="api-pledge"),
]
