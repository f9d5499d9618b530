"""Metrics kept in the backend, so every process (CLI, dashboard, health checks) reads the
same figures: per queue and minute, how many attempts succeeded, failed and went to the DLQ
and how long they ran, plus each queue's latest errors.

Workers do not write per job: settlements are tallied in process (:class:`MetricsBuffer`, one
per backend) and added to the shared records once a second by the queue's flush loop, at the
end of a ``tick`` and at shutdown, so the hot path pays a dict update per job.  A process that
dies loses at most its last unflushed second.  Minutes are kept :data:`KEEP_MINUTES` and the
latest :data:`ERRORS_KEPT` errors per queue (a ring of records, so their number is bounded
whatever fails); error texts are sealed like ``last_error``.  Each queue also has one record of
all-time totals with the durations' histogram (:class:`Totals`, the Prometheus endpoint's
counters), which never expires; on a backend without shared records each process keeps its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from ._clock import to_datetime
from ._codec import place
from ._metrics_buffer import PendingError, Tally, Totals
from ._records import RecordStore, decode_value
from ._runtime import BackendRuntime
from .errors import BadArgumentError

__all__ = [
    "ERRORS_KEPT",
    "FLUSH_INTERVAL",
    "KEEP_MINUTES",
    "MinuteMetrics",
    "QueueMetrics",
    "RecentError",
    "check_window",
    "flush_metrics",
    "read_metrics",
    "read_totals",
]

KEEP_MINUTES = 24 * 60
"""How many minutes of figures the backend keeps per queue (the longest ``window``)."""

ERRORS_KEPT = 50
"""How many recent errors the backend keeps per queue."""

FLUSH_INTERVAL = 1.0
"""Seconds (of the queue's clock) between two flushes of a process's tallies."""

_METRICS, _ERRORS, _ERROR_SEQ, _TOTALS = "metrics", "errors", "errors-seq", "metrics-totals"


@attrs.frozen(kw_only=True)
class MinuteMetrics:
    """One minute of a queue's figures (attempts settled in that minute)."""

    start: datetime
    succeeded: int
    failed: int
    """Attempts that failed, retried or not."""
    dead: int
    """Of the failed attempts, those that sent their job to the DLQ."""
    average_duration: float | None
    """Mean seconds from handler start to settlement; ``None`` without attempts."""


@attrs.frozen(kw_only=True)
class RecentError:
    """One of a queue's latest failed attempts."""

    job_id: str
    queue: str
    at: datetime
    error: str
    attempts: int
    dead: bool
    """Whether this failure sent the job to the DLQ."""


@attrs.frozen(kw_only=True)
class QueueMetrics:
    """A queue's figures over a sliding window (:meth:`Queue.metrics`), from every process."""

    queue: str
    backend: str
    window: float
    minutes: Sequence[MinuteMetrics]
    """One entry per minute of the window, oldest first, the current minute last."""
    succeeded: int
    failed: int
    dead: int
    throughput_per_minute: float
    """Jobs succeeded per minute, averaged over the window."""
    average_duration: float | None
    error_rate: float
    """Failed attempts / all attempts settled in the window (0.0 without attempts)."""
    recent_errors: Sequence[RecentError]
    """Newest first, at most :data:`ERRORS_KEPT`."""


def queue_prefix(queue: str) -> str:
    """Keys start with the queue name's length, so no queue's keys prefix another's."""
    return f"{len(queue)}:{queue}:"


def _minute_key(queue: str, minute: int) -> str:
    return f"{queue_prefix(queue)}{minute:012d}"


async def flush_metrics(runtime: BackendRuntime) -> None:
    """Add this process's tallies to the backend's records (nothing to do: no call)."""
    buffer = runtime.metrics
    if not buffer and not buffer.flushing.locked():
        return
    async with buffer.flushing:
        tallies, errors, totals = buffer.take()
        if runtime.backend.capabilities.records:
            await _write(runtime, tallies, errors, totals)
        else:
            # Nowhere to share them: the minutes are dropped, so they never grow; the
            # totals (one per queue) stay with this process.
            buffer.keep(totals)


async def _write(
    runtime: BackendRuntime,
    tallies: dict[tuple[str, int], Tally],
    errors: dict[str, list[PendingError]],
    totals: dict[str, Totals],
) -> None:
    store = RecordStore(runtime)
    for queue, more in totals.items():
        await store.add(_TOTALS, queue_prefix(queue), more.counters())
    for (queue, minute), tally in tallies.items():
        deltas = {name: value for name, value in attrs.asdict(tally).items() if value}
        await store.add(
            _METRICS,
            _minute_key(queue, minute),
            deltas,
            expires_at=(minute + 1 + KEEP_MINUTES) * 60.0,
        )
    for queue, pending in errors.items():
        # A ring of ERRORS_KEPT slots per queue: the sequence says which slots these take.
        record, _ = await store.add(_ERROR_SEQ, queue_prefix(queue), {"n": len(pending)})
        last = int(record.counters.get("n", 0))
        for offset, item in enumerate(pending):
            slot = (last - len(pending) + offset) % ERRORS_KEPT
            await store.put(
                _ERRORS,
                f"{queue_prefix(queue)}{slot:04d}",
                {
                    "job_id": item.job_id,
                    "at": item.at,
                    "error": runtime.codec.encode_error(
                        item.error, _error_place(queue, item.job_id)
                    ),
                    "attempts": item.attempts,
                    "dead": item.dead,
                },
                expires_at=item.at + KEEP_MINUTES * 60.0,
            )


async def read_totals(runtime: BackendRuntime) -> dict[str, Totals]:
    """Every queue's all-time totals, by queue name: as every process sharing the backend
    flushed them, or this process's own on a backend without shared records."""
    await flush_metrics(runtime)  # this process's own latest second counts too
    buffer = runtime.metrics
    if not runtime.backend.capabilities.records:
        return {queue: Totals.from_counters(t.counters()) for queue, t in buffer.kept.items()}
    totals: dict[str, Totals] = {}
    for record in await RecordStore(runtime).list(_TOTALS):
        length, _, rest = record.key.partition(":")
        if length.isdigit():  # the key is queue_prefix(queue)
            totals[rest[: int(length)]] = Totals.from_counters(record.counters)
    return totals


def _error_place(queue: str, job_id: str) -> bytes:
    """Where a recent error's sealed text belongs: its queue and job, as a metrics entry."""
    return place("metrics-error", queue, job_id)


def check_window(window: Any) -> float:
    if (
        isinstance(window, bool)
        or not isinstance(window, int | float)
        or not math.isfinite(window)
        or not 60 <= window <= KEEP_MINUTES * 60
    ):
        raise BadArgumentError(
            "queue/bad-argument",
            f"window must be seconds between 60 and {KEEP_MINUTES * 60} (the backend keeps "
            f"{KEEP_MINUTES // 60} hours of per-minute figures), got {window!r}",
        )
    return float(window)


async def read_metrics(runtime: BackendRuntime, queue: str, window: float) -> QueueMetrics:
    """The figures of ``queue`` over the last ``window`` seconds, whole minutes, the current
    (partial) minute included."""
    await flush_metrics(runtime)  # this process's own latest second counts too
    store = RecordStore(runtime)
    now = store.now()
    current = int(now // 60)
    minutes = list(range(current - math.ceil(window / 60) + 1, current + 1))
    records = await store.get_many(_METRICS, [_minute_key(queue, m) for m in minutes])
    series: list[MinuteMetrics] = []
    total = Tally()
    for minute, record in zip(minutes, records, strict=True):
        c = {} if record is None else record.counters
        tally = Tally(
            succeeded=int(c.get("succeeded", 0)),
            failed=int(c.get("failed", 0)),
            dead=int(c.get("dead", 0)),
            duration_sum=float(c.get("duration_sum", 0.0)),
            duration_count=int(c.get("duration_count", 0)),
        )
        for field in attrs.fields(Tally):
            setattr(total, field.name, getattr(total, field.name) + getattr(tally, field.name))
        series.append(
            MinuteMetrics(
                start=to_datetime(minute * 60.0),
                succeeded=tally.succeeded,
                failed=tally.failed,
                dead=tally.dead,
                average_duration=_mean(tally.duration_sum, tally.duration_count),
            )
        )
    attempts = total.succeeded + total.failed
    return QueueMetrics(
        queue=queue,
        backend=runtime.name,
        window=window,
        minutes=series,
        succeeded=total.succeeded,
        failed=total.failed,
        dead=total.dead,
        throughput_per_minute=total.succeeded / len(minutes),
        average_duration=_mean(total.duration_sum, total.duration_count),
        error_rate=total.failed / attempts if attempts else 0.0,
        recent_errors=await _recent_errors(runtime, store, queue),
    )


async def _recent_errors(
    runtime: BackendRuntime, store: RecordStore, queue: str
) -> Sequence[RecentError]:
    out: list[RecentError] = []
    for record in await store.list(_ERRORS, prefix=queue_prefix(queue)):
        value = decode_value(record)
        if not isinstance(value, dict):
            continue
        try:
            error = (
                runtime.codec.decode_error(
                    value["error"], _error_place(queue, str(value["job_id"]))
                )
                or ""
            )
        except Exception:  # a key rotated away: the error is unreadable, the entry still counts
            error = "(error text could not be unsealed)"
        out.append(
            RecentError(
                job_id=str(value["job_id"]),
                queue=queue,
                at=to_datetime(float(value["at"])),
                error=error,
                attempts=int(value["attempts"]),
                dead=bool(value["dead"]),
            )
        )
    out.sort(key=lambda e: e.at, reverse=True)
    return out


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None
