"""``--log-format json`` (``blamequeue worker``): every line the command writes to stderr is one
JSON object: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the record's
``extra`` fields when it has any (a job's ``job_id``, ``queue``, ``attempt`` and ``backend``;
several jobs' ``job_ids`` and ``count``), and ``exception`` (the traceback's text) when there is
one.  The lines said to the operator (:func:`~._running.say`) and the error that ends the
command are JSON objects too, once :func:`use_json_logs` has switched them on."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["LOG_FORMATS", "JsonLogFormatter", "json_logs", "say_as_log", "use_json_logs"]

LOG_FORMATS = ("text", "json")

#: Whether this run of the command writes JSON lines (set by :func:`use_json_logs`).
_json = False

#: What every record has: anything else on a record came in through ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in line:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def use_json_logs(on: bool = True) -> None:
    """Write this run's log records, the lines said to the operator and its final error as
    JSON lines (``on=False``: as plain text lines, the default); call it before
    :func:`~._errors.log_to_stderr`."""
    global _json
    _json = on


def json_logs() -> bool:
    """Whether :func:`use_json_logs` switched JSON lines on."""
    return _json


def say_as_log(
    message: str,
    logger: str,
    *,
    level: int = logging.INFO,
    fields: Mapping[str, Any] | None = None,
) -> None:
    """A line for the operator on stderr, as a JSON log line of ``logger`` at ``level`` (shown
    whatever the log level, as the text lines are), with ``fields`` after its message."""
    record = logging.LogRecord(logger, level, __file__, 0, message, None, None)
    record.__dict__.update(fields or {})
    sys.stderr.write(JsonLogFormatter().format(record) + "\n")
    sys.stderr.flush()
