"""What a failed job's ``last_error`` says (SPEC §14, "Errors people read"): the exception's
type and message first, then its traceback without the frames inside blamequeue's own
packages, with the paths of installed packages and of Python itself shortened
(``<site-packages>/httpx/_client.py``, ``<stdlib>/asyncio/tasks.py``), so what is left is the
user's own code, readable.  Chained exceptions (``raise X from Y``, an error while handling
another) and exception groups keep their parts, each trimmed the same way."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
import traceback

from ._redaction import redacted

__all__ = ["LIBRARY_PACKAGES", "MAX_ERROR", "describe_error", "headline", "short_path"]

#: The packages whose frames a ``last_error`` leaves out: core and the bundled backends.
LIBRARY_PACKAGES = (
    "blamequeue",
    "blamequeue_local",
    "blamequeue_redis",
    "blamequeue_sqs",
    "blamequeue_testing",
)
#: The longest ``last_error`` stored; a longer one is cut at its end.
MAX_ERROR = 16_384
_TRUNCATED = "\n...[truncated]"


def headline(exc: BaseException) -> str:
    """``"ValueError: boom"`` (the type alone when the message is empty)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def describe_error(exc: BaseException) -> str:
    """The ``last_error`` of a handler that raised ``exc``: :func:`headline` first, then the
    trimmed traceback (left out when no frame is left and nothing is chained); credentials
    in URLs are masked, and the whole is at most :data:`MAX_ERROR` characters."""
    head = headline(exc)
    shown = traceback.TracebackException.from_exception(exc)
    _trim(shown, set())
    tb = "".join(shown.format()).rstrip()
    text = redacted(f"{head}\n{tb}" if tb and tb != head else head)
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - len(_TRUNCATED)] + _TRUNCATED


def _trim(shown: traceback.TracebackException, seen: set[int]) -> None:
    if id(shown) in seen:
        return
    seen.add(id(shown))
    kept = [frame for frame in shown.stack if not _inside_library(frame.filename)]
    for frame in kept:
        # The source lines were read when the frames were taken, under their real paths.
        frame.filename = short_path(frame.filename)
    shown.stack = traceback.StackSummary.from_list(kept)
    if getattr(shown, "filename", None) is not None:  # a SyntaxError's own location
        shown.filename = short_path(shown.filename)
    for linked in (shown.__cause__, shown.__context__, *(shown.exceptions or ())):
        if linked is not None:
            _trim(linked, seen)


def _inside_library(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = os.path.normcase(os.path.abspath(filename))
    return path.startswith(_library_directories())


@functools.cache
def _library_directories() -> tuple[str, ...]:
    """Where the :data:`LIBRARY_PACKAGES` installed here live (each with a trailing
    separator); found without importing them."""
    directories = []
    for name in LIBRARY_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            directories.append(os.path.join(os.path.normcase(os.path.abspath(location)), ""))
    return tuple(directories)


def short_path(filename: str) -> str:
    """``filename`` with the part up to ``site-packages`` (or ``dist-packages``) written
    ``<site-packages>``, and Python's standard library or installation prefix ``<stdlib>`` or
    ``<python>``; any other path as it was."""
    if filename.startswith("<"):
        return filename
    parts = filename.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            at = len(parts) - 1 - parts[::-1].index(marker)
            return "/".join([f"<{marker}>", *parts[at + 1 :]])
    for directory, label in _prefixes():
        if filename.startswith(directory):
            return f"<{label}>/" + filename[len(directory) :].replace("\\", "/")
    return filename


@functools.cache
def _prefixes() -> tuple[tuple[str, str], ...]:
    """(directory with a trailing separator, label), the longest first."""
    paths = sysconfig.get_paths()
    found = {
        os.path.join(paths[key], ""): "stdlib" for key in ("stdlib", "platstdlib") if key in paths
    }
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        found.setdefault(os.path.join(prefix, ""), "python")
    return tuple(sorted(found.items(), key=lambda item: -len(item[0])))
