"""A job's ``meta``, typed: what the core stores beside a job's payload to decide how it runs.

Backends store ``meta`` as opaque text (a JSON object) and never read it.  The core writes it
when a job is built and reads it back here, once per attempt, into a :class:`JobMeta`, instead
of each concern parsing (or sniffing) the text on its own.  The stored text is never rewritten
from a parsed value: a payload's seal covers that text exactly (``_codec.payload_place``).

The keys, one per concern that owns them:

* ``task`` (``_tasks``): the registered task to run;
* ``context`` (``_job_seals``): the ``with_context`` values, sealed for their job when sealing
  is on, else a JSON object;
* ``batch`` (``_batches``): the id of the batch the job belongs to;
* ``flow_name`` (``_flows``): the child's name in its flow;
* ``flow_queues`` (``_flows``): every queue of the child's flow, when it spans several (so
  the core wakes their consumers when this job's end may release a child there);
* ``backoff`` (``_backoff``): the job's own backoff, as ``Backoff.to_spec()``;
* ``timeout`` (``_timeouts``): seconds a handler may run;
* ``trace`` (``_tracing``): the trace context of the span that enqueued the job, as
  OpenTelemetry's propagators write it (``traceparent``, maybe ``tracestate``); absent when
  nothing was traced.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import attrs

__all__ = [
    "BACKOFF_KEY",
    "BATCH_KEY",
    "CONTEXT_KEY",
    "FLOW_NAME_KEY",
    "FLOW_QUEUES_KEY",
    "TASK_KEY",
    "TIMEOUT_KEY",
    "TRACE_KEY",
    "JobMeta",
]

TASK_KEY: Final = "task"
CONTEXT_KEY: Final = "context"
BATCH_KEY: Final = "batch"
FLOW_NAME_KEY: Final = "flow_name"
FLOW_QUEUES_KEY: Final = "flow_queues"
BACKOFF_KEY: Final = "backoff"
TIMEOUT_KEY: Final = "timeout"
TRACE_KEY: Final = "trace"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str))


def _carrier(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


@attrs.frozen(kw_only=True)
class JobMeta:
    """The parsed ``meta`` of one stored job.  A value no version of the core could have
    written (a wrong type, bad JSON) reads as absent rather than failing the job: what decides
    what runs is authenticated by the payload's seal, the rest only tunes how it runs."""

    task: str | None = None
    context: Any = None
    """As stored: a sealed string (opened by ``_job_seals.open_context``) or a JSON object."""
    batch: str | None = None
    flow_name: str | None = None
    flow_queues: tuple[str, ...] = ()
    """Every queue of the job's flow when it spans several, else empty."""
    backoff: Any = None
    """The job's own backoff spec, or ``None`` for the backend's."""
    timeout: float | None = None
    trace: dict[str, str] | None = None
    """The producer's trace context (header names to values), or ``None``."""

    @classmethod
    def parse(cls, text: str | None) -> JobMeta:
        """The meta stored as ``text`` (``None`` or ``""``: a job without one)."""
        if not text:
            return _EMPTY
        try:
            value = json.loads(text)
        except ValueError:
            return _EMPTY
        if not isinstance(value, dict):
            return _EMPTY
        return cls(
            task=_text(value.get(TASK_KEY)),
            context=value.get(CONTEXT_KEY),
            batch=_text(value.get(BATCH_KEY)),
            flow_name=_text(value.get(FLOW_NAME_KEY)),
            flow_queues=_texts(value.get(FLOW_QUEUES_KEY)),
            backoff=value.get(BACKOFF_KEY),
            timeout=_seconds(value.get(TIMEOUT_KEY)),
            trace=_carrier(value.get(TRACE_KEY)),
        )


_EMPTY: Final = JobMeta()
