"""The JSON log line (``LOG_FORMAT=json``, named in ``settings.LOGGING``): one object per
record, with every structured field the record carries (``extra=``), so a log search can
select by field: the write path's ``dynamo_error_code``, for one. Imported while logging
is configured, so nothing here may import Django's models or the project's views."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# What every LogRecord has; anything else on a record was passed as ``extra=``.
_STANDARD = frozenset(
    (
        *vars(logging.LogRecord("", 0, "", 0, "", (), None)),
        "message",
        "asctime",
    )
)


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", …fields, "exc"}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # A value JSON cannot hold (Django's request object, say) is written as its text.
        return json.dumps(line, default=str, ensure_ascii=False)
