"""Celery tasks of reconciliation cases (sweeps, retries, override expiry)."""
