"""Celery tasks, one module per area; imported here so autodiscovery finds them all."""

from reconciliation.tasks import audit, cases, drill  # noqa: F401
