"""Logging filters named in ``settings.LOGGING`` (imported while logging is configured,
so nothing here may import Django's models or the project's views)."""

from __future__ import annotations

import logging


class RefusalWithoutTraceback(logging.Filter):
    """On ``django.request``: a refusal (403) is an answer the product gives on purpose,
    so its log line carries no stack trace; one warning line with the path is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
