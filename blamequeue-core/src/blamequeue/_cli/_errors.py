"""How an error reaches the person at the terminal (SPEC §14, "Errors people read"): one line
on stderr per error (its code or type, its message, what to do), log lines without their
tracebacks, and the full tracebacks only with ``blamequeue --debug`` (or
``BLAMEQUEUE_DEBUG=1``).  Credentials in URLs are masked in all of it."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import TypeAlias

from blamequeue._environment import env_flag
from blamequeue._redaction import redacted
from blamequeue._tracebacks import headline, short_path
from blamequeue.errors import QueueError

from ._log_format import JsonLogFormatter, json_logs, say_as_log
from ._running import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Interrupted,
    UsageError,
    exit_code_for,
    say,
)

__all__ = [
    "DEBUG_HINT",
    "UserCodeError",
    "debug_wanted",
    "import_failed",
    "log_to_stderr",
    "report",
]

#: What an error line says to do when the traceback may help.
DEBUG_HINT = "run `blamequeue --debug ...` (or set BLAMEQUEUE_DEBUG=1) to see the traceback"


class UserCodeError(Exception):
    """The user's own code raised, e.g. while its module was imported for ``worker`` or
    ``tick`` (exit code 1).  The message names the module and the error; what was raised is
    its ``__cause__``, shown in full with ``--debug``."""


def import_failed(module: str, exc: BaseException) -> UserCodeError:
    """The error for ``import module`` raising ``exc`` inside the user's code (raise it
    ``from exc``)."""
    if isinstance(exc, SyntaxError):
        where = ""  # its message names the file and line
    else:
        frames = [
            frame
            for frame in traceback.extract_tb(exc.__traceback__)
            if not frame.filename.startswith("<frozen")
        ]
        where = f" at {short_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return UserCodeError(
        f"importing module {module!r} raised {headline(exc)}{where}; fix it in that module "
        f"(or what it imports); {DEBUG_HINT}"
    )


def debug_wanted(option: bool, env: Mapping[str, str] | None = None) -> bool:
    """``--debug``, or else ``BLAMEQUEUE_DEBUG`` set to 1/true (a value that is neither is
    reported on stderr and taken as off)."""
    if option:
        return True
    try:
        return bool(env_flag(os.environ if env is None else env, "BLAMEQUEUE_DEBUG"))
    except QueueError as exc:
        say(f"warning: {exc}", level=logging.WARNING)
        return False


def _leaves(exc: BaseException) -> list[BaseException]:
    """The errors inside (possibly nested) exception groups: task groups wrap what they raise."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def report(exc: BaseException, *, debug: bool) -> int:
    """Tell the user about ``exc``, raised by a command; the exit code.  Each error in it is one
    line (``error: [code] message`` for a :class:`QueueError`); an interrupt is the line
    ``interrupted``.  With ``debug`` the full traceback comes first.  With ``--log-format
    json`` each line is a JSON object instead (:func:`_json_line`)."""
    leaves = _leaves(exc)
    trace = redacted("".join(traceback.format_exception(exc))) if debug else None
    if any(isinstance(leaf, KeyboardInterrupt | Interrupted) for leaf in leaves):
        _tell("interrupted", None, EXIT_INTERRUPTED, None)
        return EXIT_INTERRUPTED
    if trace is not None and not json_logs():
        sys.stderr.write(trace)
    usage = [leaf for leaf in leaves if isinstance(leaf, UsageError)]
    if usage:
        _tell(f"error: {usage[0]}", None, EXIT_USAGE, trace)
        return EXIT_USAGE
    codes = []
    for leaf in leaves:
        code = exit_code_for(leaf) if isinstance(leaf, QueueError) else EXIT_ERROR
        _tell(f"error: {_line(leaf, debug)}", leaf, code, trace)
        trace = None  # one traceback, on the first line
        codes.append(code)
    return max(codes)


def _tell(line: str, error: BaseException | None, exit_code: int, trace: str | None) -> None:
    """One line of :func:`report`: plain text, or with ``--log-format json`` a JSON object of
    the logger ``blamequeue.cli``: ``level`` (``ERROR``; ``WARNING`` for an interrupt),
    ``message`` (the line without its ``error:``), ``code`` for a :class:`QueueError`,
    ``exit_code``, and ``exception`` (the traceback) with ``--debug``."""
    if not json_logs():
        say(redacted(line))
        return
    fields: dict[str, object] = {}
    if isinstance(error, QueueError):
        fields["code"] = error.code
    fields["exit_code"] = exit_code
    if trace is not None:
        fields["exception"] = trace
    level = logging.WARNING if exit_code == EXIT_INTERRUPTED else logging.ERROR
    message = redacted(line.removeprefix("error: "))
    say_as_log(message, "blamequeue.cli", level=level, fields=fields)


def _line(error: BaseException, debug: bool) -> str:
    if isinstance(error, QueueError):
        return str(error)
    if isinstance(error, UserCodeError):
        return str(error).replace(f"; {DEBUG_HINT}", "") if debug else str(error)
    what = f"{headline(error)} (an unexpected error"
    return f"{what}; see the traceback above)" if debug else f"{what}; {DEBUG_HINT})"


_ExcInfo: TypeAlias = (
    tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
)


class _OneLineFormatter(logging.Formatter):
    """A log record on one line: the exception it carries (if any) named at its end, not its
    traceback; with ``debug`` the traceback too."""

    def __init__(self, fmt: str, *, debug: bool) -> None:
        super().__init__(fmt)
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and not self.debug:
            said = str(error)
            if not said or said not in record.getMessage():
                text += f": {headline(error)}"
        return redacted(text)

    def formatException(self, ei: _ExcInfo) -> str:
        return super().formatException(ei) if self.debug else ""

    def formatStack(self, stack_info: str) -> str:
        return super().formatStack(stack_info) if self.debug else ""


def log_to_stderr(level: str, *, debug: bool) -> None:
    """Log records of ``level`` and above go to stderr, one line each (see above; JSON lines
    once :func:`~._log_format.use_json_logs` switched them on)."""
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = (
        JsonLogFormatter()
        if json_logs()
        else _OneLineFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", debug=debug)
    )
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler])
