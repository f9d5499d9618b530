"""Argument checks shared by every entry point: reject before anything is stored."""

from __future__ import annotations

import math
from typing import Any

from .errors import BadArgumentError

__all__ = [
    "check_callable",
    "check_delay",
    "check_max_attempts",
    "check_optional_str",
    "check_positive_int",
    "check_positive_seconds",
    "check_priority",
    "check_queue_name",
]

PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
_MAX_NAME = 200


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_queue_name(value: Any, what: str = "queue_name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > _MAX_NAME or any(ord(c) < 32 for c in value):
        raise _bad(
            f"{what} must be at most {_MAX_NAME} printable characters, got {value[:40]!r}..."
        )
    return value


def check_priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"priority must be an int (higher leases first), got {value!r}")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise _bad(f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, got {value}")
    return value


def check_delay(value: Any, what: str = "delay") -> float:
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise _bad(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def check_positive_seconds(value: Any, what: str) -> float:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise _bad(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def check_positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(f"{what} must be an integer >= 1, got {value!r}")
    return value


def check_max_attempts(value: Any) -> int | None:
    if value is None:
        return None
    check_positive_int(value, "max_attempts")
    if value > PRIORITY_MAX:  # every store keeps it as a 32-bit-safe integer
        raise _bad(f"max_attempts must be at most {PRIORITY_MAX}, got {value}")
    return int(value)


def check_optional_str(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(f"{what} must be a string or None, got {type(value).__name__}")
    return value


def check_callable(value: Any, what: str = "handler") -> Any:
    if not callable(value):
        raise _bad(f"{what} must be a callable (async def handler(job, ctx)), got {value!r}")
    return value
