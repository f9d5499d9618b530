"""The OpenTelemetry hooks (imported by :mod:`._tracing` only, and only when
``opentelemetry-api`` is installed): the one module that imports ``opentelemetry``.

Spans follow OpenTelemetry's messaging semantic conventions: a producing call (an enqueue, a
batch's dispatch) is a ``send <queue>`` span (kind ``PRODUCER``), each attempt a ``process
<queue>`` span (kind ``CONSUMER``) whose parent is the ``send`` span, in any process.  The
link between them is the W3C trace context, written into the job's ``meta`` with
:func:`opentelemetry.propagate.inject` and read back with ``extract``: the application's
configured propagators decide its headers.
Every attempt of a job (its retries too) is a child of the same ``send`` span; a job enqueued
without a trace context starts a trace of its own.

The metrics (meter ``blamequeue``) are counted when an attempt's outcome is decided in this
process, attributes ``messaging.system`` and ``messaging.destination.name``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from importlib import metadata
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from ._audit import error_type
from ._job_meta import TRACE_KEY
from ._metrics_buffer import DURATION_BUCKETS
from .errors import QueueError

if TYPE_CHECKING:
    from ._job_meta import JobMeta
    from ._runtime import BackendRuntime
    from .abc import Settlement, StoredJob

__all__ = ["add_trace_context", "note_failure", "sending", "traced_attempt", "traced_send"]

F = TypeVar("F", bound=Callable[..., Any])

SYSTEM: Final = "blamequeue"

# Seconds: the same bounds as the Prometheus endpoint's histogram.
_BUCKETS: Final = DURATION_BUCKETS


def _version() -> str:
    try:
        return metadata.version("blamequeue-core")
    except metadata.PackageNotFoundError:  # run from a source tree
        return ""


_tracer = trace.get_tracer("blamequeue", _version())
_meter = metrics.get_meter("blamequeue", _version())
_processed = _meter.create_counter(
    "blamequeue.jobs.processed", unit="{job}", description="Attempts that succeeded."
)
_failed = _meter.create_counter(
    "blamequeue.jobs.failed",
    unit="{job}",
    description="Attempts that failed, retried or sent to the dead-letter queue.",
)
_dead = _meter.create_counter(
    "blamequeue.jobs.dead",
    unit="{job}",
    description="Attempts that sent their job to the dead-letter queue.",
)
_processing = _meter.create_histogram(
    "blamequeue.job.process.duration",
    unit="s",
    description="Seconds from a handler's start to its attempt's outcome.",
    explicit_bucket_boundaries_advisory=_BUCKETS,
)
_waiting = _meter.create_histogram(
    "blamequeue.job.wait.duration",
    unit="s",
    description="Seconds a job waited from being due to its attempt's start.",
    explicit_bucket_boundaries_advisory=_BUCKETS,
)


def _queue_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    queue = kwargs["queue_name"] if "queue_name" in kwargs else args[0] if args else None
    return queue if isinstance(queue, str) else repr(queue)


def _sent(span: trace.Span, result: Any, attributes: Mapping[str, str] | None = None) -> None:
    if isinstance(result, str):
        span.set_attribute("messaging.message.id", result)
    elif isinstance(result, list):
        span.set_attribute("messaging.batch.message_count", len(result))
        if len(result) == 1 and isinstance(result[0], str):
            span.set_attribute("messaging.message.id", result[0])
    if attributes:
        span.set_attributes(attributes)


@contextlib.contextmanager
def sending(queue: str) -> Iterator[Callable[..., None]]:
    """A ``send <queue>`` span, current inside the block (so :func:`add_trace_context` writes
    its context into the jobs built there); the block calls what it is given with what it
    stored (a job id, or the list of ids of a batch) and any more attributes."""
    with _tracer.start_as_current_span(
        f"send {queue}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.destination.name": queue,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        },
    ) as span:
        try:
            yield functools.partial(_sent, span)
        except Exception as exc:  # recorded (and the status set) by the span on its way out
            code = exc.code if isinstance(exc, QueueError) else type(exc).__qualname__
            span.set_attribute("error.type", code)
            raise


def traced_send(method: F) -> F:
    """Trace each call of a producing method of :class:`Queue` (its first argument or
    ``queue_name``: the queue) as a ``send`` span (:func:`sending`), current while it builds
    and stores the jobs."""

    @functools.wraps(method)
    async def send(self: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            # No SDK set up: the API's tracer would only hand back the current span, so
            # none is built (~10 us an enqueue); the trace context in the jobs' meta is
            # the same (add_trace_context writes the current one).
            return await method(self, *args, **kwargs)
        with sending(_queue_of(args, kwargs)) as sent:
            result = await method(self, *args, **kwargs)
            sent(result)
            return result

    return cast(F, send)


def add_trace_context(fields: MutableMapping[str, Any]) -> None:
    """Put the current trace context in the ``meta`` ``fields`` of new jobs, as the
    configured propagators write it; nothing when they write nothing (no span)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if carrier:
        fields[TRACE_KEY] = carrier


def traced_attempt(run: F) -> F:
    """Trace each attempt ``run`` (``run_attempt``) runs as a ``process`` span, current
    while the handler runs (its own spans are children), and count it in the metrics."""

    @functools.wraps(run)
    async def process(runtime: BackendRuntime, attempt: Any, handler: Any) -> Settlement:
        job: StoredJob = attempt.job
        meta: JobMeta = attempt.meta
        labels = {"messaging.system": SYSTEM, "messaging.destination.name": job.queue}
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            # No SDK set up: as for a send, no span is built (the API's would record
            # nothing; ~15 us an attempt); the metrics still count.
            untraced: Settlement = await run(runtime, attempt, handler)
            _count(runtime, attempt.started_at, job, untraced.outcome, labels)
            return untraced
        attributes: dict[str, str | int] = {
            **labels,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.id": job.id,
            "messaging.blamequeue.attempt": job.attempts,
        }
        if meta.task is not None:
            attributes["messaging.blamequeue.task"] = meta.task
        # The producer's span is the parent; without one the attempt starts its own trace.
        parent = propagate.extract(meta.trace or {}, context=Context())
        with _tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,  # a cancelled attempt (shutdown) is no failure
            set_status_on_exception=False,
        ) as span:
            settlement: Settlement = await run(runtime, attempt, handler)
            outcome = settlement.outcome
            span.set_attribute("messaging.blamequeue.outcome", outcome)
            if outcome in ("retry", "dead"):
                error: str = attempt.error or outcome
                span.set_attribute("error.type", error_type(error))
                span.set_status(Status(StatusCode.ERROR, error.split("\n", 1)[0]))
            _count(runtime, attempt.started_at, job, outcome, labels)
            return settlement

    return cast(F, process)


def _count(
    runtime: BackendRuntime,
    started_at: float | None,
    job: StoredJob,
    outcome: str,
    labels: Mapping[str, str],
) -> None:
    if started_at is None:
        return
    _waiting.record(max(started_at - job.available_at, 0.0), labels)
    if outcome not in ("done", "retry", "dead"):
        return  # given back (deferred, a missing key): no outcome yet
    _processing.record(max(runtime.clock.now() - started_at, 0.0), labels)
    if outcome == "done":
        _processed.add(1, labels)
        return
    _failed.add(1, labels)
    if outcome == "dead":
        _dead.add(1, labels)


def note_failure(error: BaseException | None) -> None:
    """Record on the current ``process`` span the exception that failed its attempt (the
    handler's, or the one the core decided on: a timeout, an unknown task)."""
    span = trace.get_current_span()
    if error is None or not span.is_recording():
        return
    span.record_exception(error)
