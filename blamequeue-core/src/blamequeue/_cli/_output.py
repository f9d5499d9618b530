"""What the inspection and operation commands print: one JSON document for ``--json``, or
tables and key/value blocks for people (times in UTC, long texts cut to their first line)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from blamequeue import DeadLetter, JobInfo, JobProgress, QueueInfo, WorkerInfo

from ._terminal import Terminal, format_table

__all__ = [
    "add_json_option",
    "ago",
    "cut",
    "dead_letter_document",
    "fields_of",
    "job_document",
    "key_values",
    "print_json",
    "print_json_or_table",
    "print_table",
    "queue_document",
    "show_payload",
    "show_progress",
    "timestamp",
    "wide",
    "worker_document",
]


def print_json(document: Any) -> None:
    """One JSON document on stdout (datetimes as ISO 8601 UTC)."""
    sys.stdout.write(json.dumps(document, ensure_ascii=False, default=_default) + "\n")
    sys.stdout.flush()


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def timestamp(value: datetime | None) -> str:
    """``2025-06-11 14:03:22Z``, or ``-``."""
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def ago(value: datetime, now: datetime) -> str:
    """``3s ago``, ``5m ago``, ``2h ago``; ``in 4s`` for a time still ahead."""
    seconds = (now - value).total_seconds()
    ahead = seconds < 0
    seconds = abs(seconds)
    if seconds < 120:
        text = f"{seconds:.0f}s"
    elif seconds < 7200:
        text = f"{seconds / 60:.0f}m"
    elif seconds < 172800:
        text = f"{seconds / 3600:.0f}h"
    else:
        text = f"{seconds / 86400:.0f}d"
    return f"in {text}" if ahead else f"{text} ago"


def cut(text: str | None, width: int) -> str:
    """The first line of ``text``, at most ``width`` characters (``...`` when cut)."""
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) > width:
        return line[: max(0, width - 3)] + "..."
    return line


def show_payload(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(", ", ": "))


def print_table(
    terminal: Terminal,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    align: str,
) -> None:
    terminal.print(format_table(headers, rows, align=align, terminal=terminal))


def wide() -> bool:
    """Whether the terminal has room for longer cuts of texts in a table."""
    return Terminal().width >= 140


def print_json_or_table(
    as_json: bool,
    document: Any,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    align: str,
    empty: str,
) -> bool:
    """``document`` as JSON with ``--json``; else ``rows`` as a table under ``headers``, or
    the line ``empty`` when there are none.  True when a table was drawn."""
    if as_json:
        print_json(document)
        return False
    terminal = Terminal()
    if not rows:
        terminal.print(empty)
        return False
    print_table(terminal, headers, rows, align)
    return True


def add_json_option(parser: argparse.ArgumentParser, *, what: str = "document") -> None:
    parser.add_argument("--json", action="store_true", help=f"print one JSON {what} on stdout")


# -- JSON documents ---------------------------------------------------------------------------
def fields_of(value: Any, names: Iterable[str]) -> dict[str, Any]:
    """``value``'s attributes ``names``, in that order (the order of the document's keys)."""
    return {name: getattr(value, name) for name in names}


def job_document(info: JobInfo) -> dict[str, Any]:
    job = info.job
    return {
        "id": job.id,
        "queue": job.queue,
        "backend": info.backend,
        "state": info.state,
        "payload": job.payload,
        "payload_error": info.payload_error,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "classification": job.classification,
        "trace_id": job.trace_id,
        "created_at": job.created_at,
        "available_at": job.available_at,
        "finished_at": info.finished_at,
        "last_error": job.last_error,
        "flow_id": job.flow_id,
        "depends_on": list(info.depends_on),
        "progress": None
        if info.progress is None
        else fields_of(info.progress, ("percent", "data", "time")),
    }


def show_progress(progress: JobProgress | None) -> str:
    """``40% {"step": "upload"} (2025-06-11 14:03:22Z)``, or ``-`` when none was reported."""
    if progress is None:
        return "-"
    data = "" if progress.data is None else f" {show_payload(progress.data)}"
    return f"{progress.percent:g}%{data} ({timestamp(progress.time)})"


def dead_letter_document(letter: DeadLetter, backend: str) -> dict[str, Any]:
    """Every field of ``letter``, with its backend after its queue."""
    job_id, queue, *rest = attrs.asdict(letter, recurse=False).items()
    return dict([job_id, queue, ("backend", backend), *rest])


def queue_document(info: QueueInfo) -> dict[str, Any]:
    return fields_of(
        info,
        ("name", "backend", "size", "pending", "inflight", "parked", "done", "dead", "cancelled"),
    )


def worker_document(info: WorkerInfo) -> dict[str, Any]:
    return fields_of(info, _WORKER_FIELDS)


_WORKER_FIELDS = (
    "id",
    "backend",
    "queue",
    "host",
    "pid",
    "concurrency",
    "in_flight",
    "succeeded",
    "failed",
    "started_at",
    "last_heartbeat",
)


def key_values(terminal: Terminal, pairs: Mapping[str, str]) -> None:
    """``key   value`` lines; a value of several lines continues indented under it."""
    width = max(len(key) for key in pairs)
    for key, value in pairs.items():
        lines = value.splitlines() or [""]
        terminal.print(f"{terminal.style(key.ljust(width), 'bold')}  {lines[0]}")
        for line in lines[1:]:
            terminal.print(" " * (width + 2) + line)
