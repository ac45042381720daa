"""The JSON log line (``LOG_FORMAT=json``): one object per record, with the record's
structured fields, such as the write path's ``dynamo_error_code``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from django.conf import settings
from django.utils.module_loading import import_string


def JsonFormatter() -> logging.Formatter:  # noqa: N802 - stands for the class it builds
    """The ``json`` formatter as ``settings.LOGGING`` configures it."""
    spec = dict(settings.LOGGING["formatters"]["json"])
    return import_string(spec.pop("()"))(**spec)


def _record(**extra: object) -> logging.LogRecord:
    logger = logging.getLogger("reconciliation.claims.outcomes")
    record = logger.makeRecord(
        logger.name,
        logging.WARNING,
        __file__,
        1,
        "throttled past the retry budget: %s",
        ("ThrottlingException",),
        None,
        extra=extra,
    )
    return record


def test_a_json_line_carries_the_records_structured_fields():
    """A record logged with ``extra={"dynamo_error_code": …}`` becomes one JSON object
    holding the message, the logger, the level and the field."""
    line = JsonFormatter().format(_record(dynamo_error_code="ThrottlingException"))
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "throttled past the retry budget: ThrottlingException"
    assert (data["level"], data["logger"]) == ("WARNING", "reconciliation.claims.outcomes")
    assert data["dynamo_error_code"] == "ThrottlingException"
    assert data["time"].endswith("+00:00")
    assert "args" not in data and "msg" not in data


def test_a_json_line_keeps_a_traceback_and_any_value_as_text():
    """An exception's traceback is one field of the same line; a value JSON cannot hold
    (an object) is written as its text."""
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = _record(request=object())
        record.exc_info = sys.exc_info()
    data = json.loads(JsonFormatter().format(record))
    assert "RuntimeError: boom" in data["exc"]
    assert data["request"].startswith("<object object")


def test_log_format_json_is_what_the_process_writes(tmp_path):
    """A process started with ``LOG_FORMAT=json`` writes each log record as a JSON line,
    structured fields included."""
    code = (
        "import django, logging; django.setup(); "
        "logging.getLogger('reconciliation.claims.outcomes').warning("
        "'claim failed: %s', 'AccessDeniedException', "
        "extra={'dynamo_error_code': 'AccessDeniedException'})"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dashboard.settings", "LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    [line] = [entry for entry in done.stderr.splitlines() if "claim failed" in entry]
    assert json.loads(line)["dynamo_error_code"] == "AccessDeniedException"
