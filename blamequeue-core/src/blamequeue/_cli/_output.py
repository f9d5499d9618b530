"""What the inspection and operation commands print: one JSON document for ``--json``, or
tables and key/value blocks for people (times in UTC, long texts cut to their first line)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from blamequeue import DeadLetter, JobInfo, QueueInfo, WorkerInfo

from ._terminal import Terminal, format_table

__all__ = [
    "ago",
    "cut",
    "dead_letter_document",
    "job_document",
    "print_json",
    "print_table",
    "queue_document",
    "show_payload",
    "timestamp",
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


# -- JSON documents ---------------------------------------------------------------------------
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
    }


def dead_letter_document(letter: DeadLetter, backend: str) -> dict[str, Any]:
    return {
        "job_id": letter.job_id,
        "queue": letter.queue,
        "backend": backend,
        "payload": letter.payload,
        "attempts": letter.attempts,
        "last_error": letter.last_error,
        "trace_id": letter.trace_id,
        "classification": letter.classification,
        "failed_at": letter.failed_at,
    }


def queue_document(info: QueueInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "backend": info.backend,
        "size": info.size,
        "pending": info.pending,
        "inflight": info.inflight,
        "parked": info.parked,
        "done": info.done,
        "dead": info.dead,
        "cancelled": info.cancelled,
    }


def worker_document(info: WorkerInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "backend": info.backend,
        "queue": info.queue,
        "host": info.host,
        "pid": info.pid,
        "concurrency": info.concurrency,
        "in_flight": info.in_flight,
        "succeeded": info.succeeded,
        "failed": info.failed,
        "started_at": info.started_at,
        "last_heartbeat": info.last_heartbeat,
    }


def key_values(terminal: Terminal, pairs: Mapping[str, str]) -> None:
    """``key   value`` lines; a value of several lines continues indented under it."""
    width = max(len(key) for key in pairs)
    for key, value in pairs.items():
        lines = value.splitlines() or [""]
        terminal.print(f"{terminal.style(key.ljust(width), 'bold')}  {lines[0]}")
        for line in lines[1:]:
            terminal.print(" " * (width + 2) + line)
