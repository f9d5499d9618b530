"""Argument checks shared by every entry point: reject before anything is stored.

**Bounds** (SPEC §14).  Every duration is finite and at most :data:`MAX_SECONDS`; every payload
is JSON that keeps each key (:func:`check_payload`) and, encoded, at most its backend's
``max_payload_bytes``.  A call's argument out of bounds is ``queue/bad-argument``, a
configuration's (``Queue(...)``, a backend option, an environment variable)
``queue/invalid-config``: pass ``config=True`` to the checks below for the latter.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import BadArgumentError, ConfigError, QueueError

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_SECONDS",
    "MAX_SECONDS_TEXT",
    "check_callable",
    "check_delay",
    "check_max_attempts",
    "check_max_payload_bytes",
    "check_optional_str",
    "check_payload",
    "check_positive_int",
    "check_positive_seconds",
    "check_priority",
    "check_queue_name",
    "is_duration",
]

PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
_MAX_NAME = 200

#: The longest duration any argument or option may name: ten years (of 365.25 days).  Long
#: enough for any real delay or retention, short enough that ``now`` plus it converts to a
#: datetime, a SQLite REAL and a Redis score without overflow, so no value a user passes can
#: make a later read (``list_jobs``, ``job_info``, the CLI, the dashboard) fail.
MAX_SECONDS = 315_576_000.0
MAX_SECONDS_TEXT = "10 years (315576000 s)"

#: A payload's JSON encoding may be this long (in UTF-8 bytes) unless the backend's
#: ``max_payload_bytes`` option says otherwise.
DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


def _fail(message: str, config: bool) -> QueueError:
    if config:
        return ConfigError("queue/invalid-config", message)
    return _bad(message)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_duration(value: Any, *, positive: bool = False, minimum: float = 0.0) -> bool:
    """Whether ``value`` is a number of seconds (not a bool) that is finite, at least
    ``minimum`` (above it when ``positive``) and at most :data:`MAX_SECONDS`.  Never raises,
    even for an int too large for a float."""
    if not _is_number(value):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return bool(value > minimum if positive else value >= minimum) and value <= MAX_SECONDS


def check_queue_name(value: Any, what: str = "queue_name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > _MAX_NAME or any(ord(c) < 32 for c in value):
        raise _bad(
            f"{what} must be at most {_MAX_NAME} printable characters, got {value[:40]!r}..."
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no store (nor seal) can hold it
        raise _bad(
            f"{what} must be valid Unicode, got {value[:40]!r} (a lone surrogate at position "
            f"{exc.start}); decode bytes properly before naming a queue"
        ) from exc
    return value


def check_priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"priority must be an int (higher leases first), got {value!r}")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise _bad(f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, got {value}")
    return value


def check_delay(value: Any, what: str = "delay", *, config: bool = False) -> float:
    """Seconds >= 0, at most :data:`MAX_SECONDS`."""
    if not is_duration(value):
        raise _fail(
            f"{what} must be a number of seconds >= 0 and at most {MAX_SECONDS_TEXT}, "
            f"got {value!r}",
            config,
        )
    return float(value)


def check_positive_seconds(value: Any, what: str, *, config: bool = False) -> float:
    """Seconds > 0, at most :data:`MAX_SECONDS`."""
    if not is_duration(value, positive=True):
        raise _fail(
            f"{what} must be a positive number of seconds, at most {MAX_SECONDS_TEXT}, "
            f"got {value!r}",
            config,
        )
    return float(value)


def check_positive_int(value: Any, what: str) -> int:
    """An int from 1 to 2**31 - 1 (what every store keeps as an integer, and far beyond any
    real count of workers or jobs: a larger one would only fail later, in a store)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(f"{what} must be an integer >= 1, got {value!r}")
    if value > PRIORITY_MAX:
        raise _bad(f"{what} must be at most {PRIORITY_MAX}, got {value}")
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


def check_max_payload_bytes(value: Any, what: str, *, ceiling: int | None = None) -> int:
    """A backend's ``max_payload_bytes`` option: an int >= 1, at most ``ceiling`` (what the
    backend's messages can carry) when it has one; ``queue/invalid-config`` else."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(f"{what} must be a number of bytes >= 1, got {value!r}", True)
    if ceiling is not None and value > ceiling:
        raise _fail(
            f"{what} must be at most {ceiling} (what fits this backend's messages), got {value}",
            True,
        )
    return value


def check_payload(value: Any, text: str, limit: int | None = None) -> str:
    """``text`` (the compact JSON of ``value``) when it loses nothing of ``value`` and is at
    most ``limit`` bytes of UTF-8 (``None``: no limit); else ``queue/bad-payload`` or
    ``queue/payload-too-large``.

    JSON keys are strings: ``json`` writes a key ``1`` as ``"1"`` (``True`` as ``"true"``,
    ``None`` as ``"null"``), so ``{1: "a", "1": "b"}`` would silently keep one value, and even
    a lone ``{1: "a"}`` would reach its handler as ``{"1": "a"}``.  Every mapping key must
    therefore be a ``str``: one rule, no collision to explain.
    """
    if limit is not None and len(text) > limit // 4:  # at most 4 UTF-8 bytes a character
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise BadArgumentError(
                "queue/payload-too-large",
                f"the payload's JSON is {size} bytes, over this backend's max_payload_bytes "
                f"({limit}); store large data elsewhere (a file, an object store) and "
                f"enqueue its address, or raise the backend's max_payload_bytes option",
            )
    # The cheap tests first (payloads are mostly flat mappings of str keys): a text without
    # "{" holds no mapping; a mapping whose text has no other "{" holds no nested one, so its
    # own keys are all there is to look at; else only a text showing a key that a non-str
    # one could have become is walked.
    if "{" in text:
        if type(value) is dict and text.find("{", 1) < 0:
            if not _STR.issuperset(map(type, value)):
                _check_keys(value)
        elif _CONVERTED_KEY.search(text) is not None:
            _check_keys(value)
    return text


#: In compact JSON every key follows "{" or ",".  A key that was not a str comes out as an
#: int's or a float's repr, or as true, false or null: a text without such a key holds none
#: (one with it may still hold only str keys, such as "1": the walk decides).
_CONVERTED_KEY = re.compile(r'[{,]"(?:-?[0-9][0-9.e+-]*|true|false|null)":')


_STR = frozenset({str})
#: Types whose values hold no mapping: a walk never looks into them.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _check_keys(value: Any) -> None:
    """Raise ``queue/bad-payload`` for the first mapping key in ``value`` that is not a str.
    A loop, not a recursion: a payload just shallow enough for the encoder must not fail
    here on the recursion limit.  Exact types are tested first, ``isinstance`` only for
    subclasses (an OrderedDict)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        children: Any
        if kind is dict or (kind not in _SCALARS and isinstance(item, dict)):
            if not _STR.issuperset(map(type, item)):
                for key in item:
                    if not isinstance(key, str):
                        raise _non_str_key(item, key)
            children = item.values()
        elif kind is list or kind is tuple or isinstance(item, list | tuple):
            children = item
        else:
            continue
        if not _SCALARS.issuperset(map(type, children)):
            pending.extend(child for child in children if type(child) not in _SCALARS)


def _non_str_key(mapping: dict[Any, Any], key: Any) -> BadArgumentError:
    as_json = key if isinstance(key, str) else _json_key(key)
    clash = [other for other in mapping if other is not key and _json_key(other) == as_json]
    why = (
        f"it collides with the key {clash[0]!r}: JSON would keep only one of them"
        if clash
        else f"JSON would turn it into the string {as_json!r}"
    )
    return BadArgumentError(
        "queue/bad-payload",
        f"payload keys must be strings; the key {key!r} ({type(key).__name__}) is not, and "
        f"{why}. Convert the keys (e.g. {{str(k): v for k, v in d.items()}}) before "
        f"enqueueing.",
    )


def _json_key(key: Any) -> str:
    """The string ``json`` writes for a mapping key."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, float):
        return float.__repr__(key)
    return repr(key)
