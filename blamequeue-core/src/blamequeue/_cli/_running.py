"""How a command is declared and runs: its parser, its event loop, its exit codes, and how
errors reach the user."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeAlias, TypeVar

import anyio

from blamequeue._validation import MAX_SECONDS, MAX_SECONDS_TEXT
from blamequeue.errors import QueueError

from ._log_format import json_logs, say_as_log
from ._terminal import Activity, Terminal

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "LOOPS",
    "Interrupted",
    "Subparsers",
    "UsageError",
    "add_command",
    "add_loop_option",
    "exit_code_for",
    "non_negative_seconds",
    "positive_int",
    "positive_seconds",
    "run_on_loop",
    "say",
    "showing_activity",
    "stopped_by_signals",
    "whole_number",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_INTERRUPTED = 130

LOOPS = ("asyncio", "trio")

#: Codes that mean "what you asked for cannot work as configured" rather than "it broke".
_CONFIG_CODES = frozenset(
    {
        "queue/invalid-config",
        "queue/deferred-protocol",
        "queue/unknown-backend",
        "queue/inspection-unsupported",
        "queue/results-unsupported",
    }
)
#: Codes that, raised by a command, mean an argument on its command line was wrong.
_USAGE_CODES = frozenset({"queue/bad-argument", "queue/bad-payload"})
_NOT_FOUND_CODES = frozenset({"queue/job-not-found"})

T = TypeVar("T")
#: What ``add_parser(subparsers)`` of each command module adds its command to.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_command(
    subparsers: Subparsers,
    name: str,
    manual: str,
    *,
    run: Callable[[argparse.Namespace], int] | None = None,
) -> argparse.ArgumentParser:
    """A subcommand (or a subcommand's action) that ``main`` runs with ``run(args)`` (None: its
    actions do).

    ``manual`` is its help as it reads: the summary line ``blamequeue --help`` lists, a blank
    line, the description (one paragraph), a blank line and the rest of ``--help`` (examples,
    notes).  Line breaks are kept as written.
    """
    summary, _, rest = manual.partition("\n\n")
    description, _, epilog = rest.partition("\n\n")
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if run is not None:
        parser.set_defaults(run=run)
    return parser


def add_loop_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loop", choices=LOOPS, default="asyncio", help="event loop to run on (default: asyncio)"
    )


class UsageError(Exception):
    """A mistake in how the command was called (exit code 2); the message says what to fix."""


def exit_code_for(exc: QueueError) -> int:
    if exc.code in _NOT_FOUND_CODES:
        return EXIT_NOT_FOUND
    return EXIT_USAGE if exc.code in _CONFIG_CODES | _USAGE_CODES else EXIT_ERROR


def say(message: str, *, logger: str = "blamequeue.cli", level: int = logging.INFO) -> None:
    """A line for the operator on stderr (stdout stays for results and ``--json``); with
    ``--log-format json`` a JSON log line of ``logger`` at ``level``."""
    if json_logs():
        say_as_log(message, logger, level=level)
        return
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the command (exit code 130)."""


def run_on_loop(fn: Callable[[], Awaitable[T]], loop: str) -> T:
    if loop == "trio" and importlib.util.find_spec("trio") is None:
        raise UsageError("--loop trio needs trio installed: pip install trio")
    return anyio.run(fn, backend=loop)


async def showing_activity(
    terminal: Terminal | None, label: str, step: Callable[[], Awaitable[T]]
) -> T:
    """``await step()``, with an :class:`Activity` line redrawn on ``terminal`` (if any) while
    it runs (see :func:`~._terminal.progress_terminal`)."""
    if terminal is None:
        return await step()
    activity = Activity(terminal, label)
    result: list[T] = []
    try:
        async with anyio.create_task_group() as tg:

            async def redraw() -> None:
                while True:
                    activity.update()
                    await anyio.sleep(0.1)

            tg.start_soon(redraw)
            result.append(await step())
            tg.cancel_scope.cancel()
    finally:
        activity.close()
    return result[0]


@asynccontextmanager
async def stopped_by_signals() -> AsyncIterator[None]:
    """SIGINT and SIGTERM cancel the body, then :class:`Interrupted` is raised.

    Use it *inside* ``async with queue:`` so the queue itself shuts down without being
    cancelled, and nothing is interrupted at an arbitrary point (a raising signal handler can
    land inside the event loop itself).
    """
    signalled: list[int] = []
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                async for signum in signals:
                    signalled.append(signum)
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
    if signalled:
        raise Interrupted(signal.Signals(signalled[0]).name)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def whole_number(text: str) -> int:
    """argparse type: an integer (negative ones too)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (e.g. 30 or 0.5), got {text!r}"
        ) from None
    if not math.isfinite(value) or abs(value) > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds, at most {MAX_SECONDS_TEXT}, got {text}"
        )
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    """argparse type: a finite number of seconds >= 0."""
    value = _seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value
