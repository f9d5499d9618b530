"""The OpenTelemetry hooks of the producer and the worker, or nothing.

With ``opentelemetry-api`` installed (the ``blamequeue[otel]`` extra) they are
:mod:`._otel`'s: a ``send`` span per enqueue (and per batch dispatched), the trace context
carried in the job's ``meta`` (key ``trace``), a ``process`` span per attempt, child of the
``send`` span, and the jobs' metrics.  Without it they are the stand-ins below, chosen here
once at import: the decorators hand back the function they are given and the calls do
nothing, so a process without OpenTelemetry pays nothing and never imports it.  Only
:mod:`._otel` imports ``opentelemetry``.

What an application sees depends on the SDK it configures (exporters, sampling,
propagators); without one the API's no-op tracer and meter record nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar

__all__ = ["add_trace_context", "note_failure", "sending", "traced_attempt", "traced_send"]

F = TypeVar("F", bound=Callable[..., Any])

try:
    from ._otel import add_trace_context, note_failure, sending, traced_attempt, traced_send
except ModuleNotFoundError as exc:
    if exc.name is None or exc.name.partition(".")[0] != "opentelemetry":
        raise

    def traced_send(method: F) -> F:
        """Trace each call of a producing method (its first argument or ``queue_name``: the
        queue) as a ``send`` span."""
        return method

    def _ignore(*args: Any, **kwargs: Any) -> None:
        pass

    @contextlib.contextmanager
    def sending(queue: str) -> Iterator[Callable[..., None]]:
        """A ``send`` span of ``queue`` around a block that builds and stores jobs (a
        batch's); the block calls what it is given with the ids it stored."""
        yield _ignore

    def traced_attempt(run: F) -> F:
        """Trace each attempt ``run`` runs as a ``process`` span and count it in the
        metrics."""
        return run

    def add_trace_context(fields: MutableMapping[str, Any]) -> None:
        """Put the current trace context in the ``meta`` ``fields`` of new jobs (nothing when
        there is none)."""

    def note_failure(error: BaseException | None) -> None:
        """Record on the current ``process`` span the exception that failed its attempt."""
