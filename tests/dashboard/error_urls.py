"""The project's URLs plus views that fail on purpose, for tests/dashboard/test_error_pages.py."""

from django.core.exceptions import SuspiciousOperation
from django.urls import path

from dashboard.urls import handler400, handler403, handler404, handler500  # noqa: F401
from dashboard.urls import urlpatterns as project_urlpatterns


def boom(request):
    raise RuntimeError("a bug in a view")


def suspicious(request):
    raise SuspiciousOperation("malformed")


def broken_context(request):
    """A context processor that fails, as one does when its store is down."""
    raise RuntimeError("context processor down")


urlpatterns = [
    path("boom/", boom),
    path("api/v1/boom", boom),
    path("suspicious/", suspicious),
    *project_urlpatterns,
]
