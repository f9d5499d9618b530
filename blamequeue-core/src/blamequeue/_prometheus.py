"""The Prometheus endpoint: ``metrics_app(queue)`` answers a scrape with the queue's figures in
the text exposition format (version 0.0.4), labelled by ``backend`` and ``queue``.

What it reads, per backend: the jobs of each queue by state, the oldest due job's wait and the
live workers (:func:`~blamequeue._health.read_figures`, as health checks do), and each queue's
all-time totals and duration histogram (:func:`~blamequeue._metrics.read_totals`): the figures
every process sharing the backend flushed, or, on a backend without shared records (``sqs``),
those of the process serving the endpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ._asgi import App, Receive, Scope, Send, read_only_method, respond
from ._health import QueueFigures, read_figures
from ._metrics import read_totals
from ._metrics_buffer import DURATION_BUCKETS, Totals
from ._redaction import redacted
from ._runtime import BackendRuntime
from .abc import WorkerRecord
from .errors import QueueError

if TYPE_CHECKING:
    from ._queue import Queue

__all__ = ["CONTENT_TYPE", "exposition", "label_value", "metrics_app"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: The ``state`` label of ``blamequeue_queue_jobs``: ``pending`` counts due jobs, ``delayed``
#: the pending ones not due yet, so the states add up to every job the queue holds.
_STATES = ("pending", "delayed", "inflight", "parked", "done", "dead", "cancelled")

#: Name, type and help of each family, in the order they are written.
_FAMILIES = (
    ("blamequeue_backend_up", "gauge", "1 when the backend answered this scrape, else 0."),
    ("blamequeue_queue_jobs", "gauge", "Jobs the queue holds, by state (pending: due)."),
    (
        "blamequeue_queue_oldest_pending_age_seconds",
        "gauge",
        "Seconds the longest-waiting due job has waited (0: none is due).",
    ),
    ("blamequeue_workers_alive", "gauge", "Live workers consuming the queue, from any process."),
    ("blamequeue_jobs_processed_total", "counter", "Attempts settled (succeeded or failed)."),
    ("blamequeue_jobs_failed_total", "counter", "Attempts that failed, retried or not."),
    ("blamequeue_jobs_dead_total", "counter", "Failed attempts that sent their job to the DLQ."),
    (
        "blamequeue_job_duration_seconds",
        "histogram",
        "Seconds from handler start to settlement, per attempt.",
    ),
)

_REFUSAL = (b"use GET or HEAD\n", b"text/plain; charset=utf-8")

Labels = Mapping[str, str]
Sample = tuple[str, Labels, float]


def label_value(value: str) -> str:
    """``value`` as a label value goes between quotes: credentials of URLs redacted, then
    backslash, double quote and line feed escaped."""
    text = redacted(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return "NaN" if math.isnan(value) else repr(value)


def _line(name: str, labels: Labels, value: float) -> str:
    inside = ",".join(f'{key}="{label_value(text)}"' for key, text in labels.items())
    return f"{name}{{{inside}}} {_number(value)}" if inside else f"{name} {_number(value)}"


def _render(samples: Mapping[str, Sequence[Sample]]) -> str:
    lines: list[str] = []
    for family, kind, text in _FAMILIES:
        lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"]
        lines += [_line(name, labels, value) for name, labels, value in samples.get(family, ())]
    return "\n".join(lines) + "\n"


def _histogram(labels: Labels, totals: Totals) -> list[Sample]:
    name = "blamequeue_job_duration_seconds"
    out: list[Sample] = []
    running = 0
    for bound, count in zip((*DURATION_BUCKETS, math.inf), totals.buckets, strict=True):
        running += count
        le = "+Inf" if math.isinf(bound) else repr(float(bound))
        out.append((f"{name}_bucket", {**labels, "le": le}, running))
    out.append((f"{name}_sum", labels, totals.duration_sum))
    out.append((f"{name}_count", labels, totals.duration_count))
    return out


def _gauges(
    backend: str, figures: Sequence[QueueFigures], workers: Sequence[WorkerRecord]
) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for figure in figures:
        info, labels = figure.info, {"backend": backend, "queue": figure.info.name}
        held = {
            "pending": figure.due,
            "delayed": figure.stats.delayed,
            "inflight": info.inflight,
            "parked": info.parked,
            "done": info.done,
            "dead": info.dead,
            "cancelled": info.cancelled,
        }
        out.setdefault("blamequeue_queue_jobs", []).extend(
            ("blamequeue_queue_jobs", {**labels, "state": state}, held[state]) for state in _STATES
        )
        out.setdefault("blamequeue_queue_oldest_pending_age_seconds", []).append(
            ("blamequeue_queue_oldest_pending_age_seconds", labels, figure.oldest_age or 0.0)
        )
    live: dict[str, int] = {figure.info.name: 0 for figure in figures}
    for record in workers:
        live[record.queue] = live.get(record.queue, 0) + 1
    out["blamequeue_workers_alive"] = [
        ("blamequeue_workers_alive", {"backend": backend, "queue": queue}, count)
        for queue, count in sorted(live.items())
    ]
    return out


def _counters(backend: str, totals: Mapping[str, Totals]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for queue in sorted(totals):
        t, labels = totals[queue], {"backend": backend, "queue": queue}
        for family, value in (
            ("blamequeue_jobs_processed_total", t.succeeded + t.failed),
            ("blamequeue_jobs_failed_total", t.failed),
            ("blamequeue_jobs_dead_total", t.dead),
        ):
            out.setdefault(family, []).append((family, labels, value))
        out.setdefault("blamequeue_job_duration_seconds", []).extend(_histogram(labels, t))
    return out


async def _backend(runtime: BackendRuntime) -> dict[str, list[Sample]]:
    name = runtime.name
    out: dict[str, list[Sample]] = {}
    try:
        if runtime.backend.capabilities.inspection:
            figures, workers = await read_figures(runtime, runtime.clock.now())
            out.update(_gauges(name, figures, workers))
        out.update(_counters(name, await read_totals(runtime)))
    except QueueError:
        return {"blamequeue_backend_up": [("blamequeue_backend_up", {"backend": name}, 0)]}
    out["blamequeue_backend_up"] = [("blamequeue_backend_up", {"backend": name}, 1)]
    return out


async def exposition(queue: Queue, *, backend: str | None = None) -> str:
    """The scrape's body: every backend of ``queue`` (or only ``backend``)."""
    names = [s.name for s in queue.list_backends()] if backend is None else [backend]
    samples: dict[str, list[Sample]] = {}
    for name in names:
        for family, more in (await _backend(queue._runtime(name))).items():
            samples.setdefault(family, []).extend(more)
    return _render(samples)


def metrics_app(queue: Queue, *, backend: str | None = None) -> App:
    """An ASGI app answering every ``GET`` / ``HEAD`` with the queue's figures in the
    Prometheus text format, for every backend (or only ``backend``): jobs by state, the
    oldest due job's wait, live workers, attempts processed / failed / dead and their
    durations' histogram, labelled ``backend`` and ``queue``.  Mount it at ``/metrics`` of
    your Starlette / FastAPI app, or serve it alone (``blamequeue metrics-serve``)::

        app = blamequeue.metrics_app(queue)

    The queue must be started by the application (e.g. in its lifespan); until then, and
    for a ``backend`` that is not configured, it answers 503.  A backend that cannot be read
    reports ``blamequeue_backend_up 0`` and no other figure.
    """

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        method = await read_only_method(scope, receive, send, _REFUSAL)
        if method is None:
            return
        try:
            status, body = 200, await exposition(queue, backend=backend)
        except QueueError as exc:
            status, body = 503, redacted(f"{exc}\n")
        await respond(send, status, body.encode(), CONTENT_TYPE.encode(), head=method == "HEAD")

    return app
