"""What the CLI draws on a terminal: colour (only on a TTY, never with ``NO_COLOR``), a progress
bar (redrawn in place on a TTY, plain lines elsewhere), an activity line for one long step whose
progress cannot be counted, and aligned tables.

Commands whose output is a result (``bench``, ``purge``, ``dlq retry-all``) show progress only
to a person: :func:`progress_terminal` is stderr when both stdout and stderr are terminals and
the output is not ``--json``, else None (nothing drawn).  The demo, whose output *is* its
progress, draws it everywhere."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TextIO

__all__ = ["Activity", "ProgressBar", "Terminal", "format_table", "progress_terminal"]

_STYLES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}


def _wants_colour(stream: TextIO, env: Mapping[str, str]) -> bool:
    # https://no-color.org: any non-empty NO_COLOR turns colour off; FORCE_COLOR turns it on
    # for CI logs that render ANSI codes.
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    if env.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Terminal:
    """One output stream and what it can show."""

    def __init__(self, stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> None:
        self.stream = sys.stdout if stream is None else stream
        env = os.environ if env is None else env
        self.tty = _isatty(self.stream)
        self.colour = _wants_colour(self.stream, env)

    @property
    def width(self) -> int:
        return shutil.get_terminal_size((80, 24)).columns

    def style(self, text: str, *styles: str) -> str:
        if not self.colour or not styles or not text:
            return text
        codes = ";".join(_STYLES[name] for name in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def print(self, text: str = "") -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def progress(self, total: int, label: str = "") -> ProgressBar:
        return ProgressBar(self, total, label)


def progress_terminal(json_output: bool) -> Terminal | None:
    """Where a command that prints a result draws its progress: stderr, when a person watches
    (stdout and stderr are terminals) and the output is not JSON; None otherwise."""
    if json_output or not (_isatty(sys.stdout) and _isatty(sys.stderr)):
        return None
    return Terminal(sys.stderr)


class ProgressBar:
    """``label [#########.........]  450/1000  45%``.

    On a TTY the line is redrawn in place with ``\\r`` (at most ~20 times a second); elsewhere
    (a log file, a pipe) it prints a plain line at each quarter and at the end, so logs stay
    readable.
    """

    _MIN_REDRAW = 0.05

    def __init__(self, terminal: Terminal, total: int, label: str = "") -> None:
        self._term = terminal
        self.total = max(0, total)
        self.label = label
        self.done = 0
        self._last_draw = 0.0
        self._last_quarter = -1
        self._closed = False

    def update(self, done: int, *, force: bool = False) -> None:
        self.done = min(max(0, done), self.total)
        if self._closed:
            return
        if self._term.tty:
            now = time.monotonic()
            if force or self.done == self.total or now - self._last_draw >= self._MIN_REDRAW:
                self._last_draw = now
                self._term.stream.write("\r" + self.render(self._term.width - 1) + "\x1b[K")
                self._term.stream.flush()
        else:
            quarter = 4 * self.done // self.total if self.total else 4
            if quarter > self._last_quarter:
                self._last_quarter = quarter
                self._term.print(self.render(60))

    def close(self) -> None:
        """Leave the finished bar on its own line."""
        if self._closed:
            return
        if self._term.tty:
            self._term.stream.write("\r" + self.render(self._term.width - 1) + "\x1b[K\n")
            self._term.stream.flush()
        elif self._last_quarter < 4 and self.done == self.total:
            self._term.print(self.render(60))
        self._closed = True

    def render(self, width: int) -> str:
        total = self.total
        fraction = self.done / total if total else 1.0
        digits = len(str(total))
        counts = f" {self.done:>{digits}}/{total} {fraction:4.0%}"
        label = f"{self.label} " if self.label else ""
        room = max(10, min(40, width - len(label) - len(counts) - 2))
        filled = round(room * fraction)
        bar = self._term.style("#" * filled, "green") + self._term.style(
            "." * (room - filled), "dim"
        )
        return f"{label}[{bar}]{counts}"


class Activity:
    """``purging queue 'emails' [   <=>    ] 1.4 s``, redrawn in place on a TTY: one long step
    (a single atomic call to the backend) whose progress cannot be counted.  :meth:`close`
    wipes the line, for the result printed after it."""

    _WIDTH = 12
    _MARKER = "<=>"

    def __init__(self, terminal: Terminal, label: str) -> None:
        self._term = terminal
        self.label = label
        self._started = time.monotonic()
        self._frame = 0
        self._closed = False

    def update(self) -> None:
        if self._closed or not self._term.tty:
            return
        self._term.stream.write("\r" + self.render() + "\x1b[K")
        self._term.stream.flush()
        self._frame += 1

    def close(self) -> None:
        if not self._closed and self._term.tty:
            self._term.stream.write("\r\x1b[K")
            self._term.stream.flush()
        self._closed = True

    def render(self) -> str:
        room = self._WIDTH - len(self._MARKER)
        step = self._frame % (2 * room)
        at = step if step <= room else 2 * room - step  # back and forth
        track = " " * at + self._term.style(self._MARKER, "green") + " " * (room - at)
        return f"{self.label} [{track}] {time.monotonic() - self._started:.1f} s"


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    align: str | None = None,
    terminal: Terminal | None = None,
) -> str:
    """Columns padded to their widest cell; ``align`` is one ``l``/``r`` per column."""
    columns = len(headers)
    align = align or "l" * columns
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if align[i] == "r" else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    head = line(headers)
    if terminal is not None:
        head = terminal.style(head, "bold")
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([head, rule, *(line(row) for row in rows)])
