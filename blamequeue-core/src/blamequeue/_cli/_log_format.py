"""``blamequeue worker --log-format json``: every line the worker writes to stderr is one JSON
object: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the record's ``extra``
fields when it has any (a job's ``job_id``, ``queue``, ``attempt`` and ``backend``), and
``exception`` (the traceback's text) when there is one."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["LOG_FORMATS", "JsonLogFormatter", "say_as_log", "use_json_logs"]

LOG_FORMATS = ("text", "json")

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


def use_json_logs() -> None:
    """Format the records of every handler of the root logger as JSON lines."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonLogFormatter())


def say_as_log(message: str, logger: str) -> None:
    """A line for the operator on stderr, as a JSON log line of ``logger`` at ``INFO`` (shown
    whatever the log level, as the text lines are)."""
    record = logging.LogRecord(logger, logging.INFO, __file__, 0, message, None, None)
    sys.stderr.write(JsonLogFormatter().format(record) + "\n")
    sys.stderr.flush()
