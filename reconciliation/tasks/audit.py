"""Celery tasks of the audit trail (daily digest, large exports)."""
