"""The Celery application, configured from Django settings (``CELERY_*``)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each domain package keeps its tasks in its own ``tasks`` module.
app.autodiscover_tasks(["reconciliation.audit", "reconciliation.casework", "reconciliation.ops"])
