"""Celery tasks, one module per area; imported here so autodiscovery finds them all."""

from reconciliation.tasks import audit, cases  # noqa: F401
