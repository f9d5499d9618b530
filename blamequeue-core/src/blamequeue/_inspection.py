"""The inspection API's conversions: what backends store, as operators see it.

``Queue.get_job``, ``job_info``, ``list_jobs``, ``queues`` and ``workers`` read through the
backend contract (``Backend.get_job`` and its neighbours, SPEC §2); this module turns the stored
rows into the public value types and checks the arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from ._clock import to_datetime
from ._execution import to_job
from ._job_seals import payload_place_of
from ._models import JobInfo, JobProgress, QueueInfo, WorkerInfo
from ._runtime import BackendRuntime
from .abc import JOB_STATES, JobState, StoredJob, WorkerRecord
from .errors import BadArgumentError, QueueError

__all__ = [
    "MAX_PAGE",
    "check_cursor",
    "check_job_id",
    "check_page_limit",
    "check_state",
    "to_job_info",
    "to_queue_info",
    "to_worker_info",
]

log = logging.getLogger("blamequeue")

MAX_PAGE = 1000
"""The largest ``limit`` of one ``list_jobs`` page."""


def _bad(message: str) -> BadArgumentError:
    return BadArgumentError("queue/bad-argument", message)


def check_job_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(f"job_id must be a non-empty string, got {value!r}")
    return value


def check_state(value: Any) -> JobState | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in JOB_STATES:
        raise _bad(f"state must be one of {', '.join(JOB_STATES)} (or None for all), got {value!r}")
    state: JobState = value
    return state


def check_page_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE:
        raise _bad(f"limit must be an integer from 1 to {MAX_PAGE}, got {value!r}")
    return value


def check_cursor(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _bad(
            f"cursor must be the next_cursor of the previous page (a non-empty string) or "
            f"None, got {value!r}"
        )
    return value


def to_job_info(
    runtime: BackendRuntime, stored: StoredJob, progress: JobProgress | None = None
) -> JobInfo:
    """Never raises for an unreadable payload: the job is shown with ``payload=None`` and the
    reason in ``payload_error`` (an operator inspecting a broken job must still see it)."""
    payload_error = None
    try:
        job = to_job(runtime, stored)
    except QueueError as exc:
        payload_error = str(exc)
        readable = attrs.evolve(
            stored, payload=runtime.codec.encode_payload(None, payload_place_of(stored))
        )
        job = to_job(runtime, readable)
    return JobInfo(
        job=job,
        state=stored.state,
        backend=runtime.name,
        finished_at=None if stored.finished_at is None else to_datetime(stored.finished_at),
        depends_on=tuple(stored.depends_on),
        payload_error=payload_error,
        progress=progress,
    )


def to_queue_info(backend: str, name: str, counts: Mapping[JobState, int]) -> QueueInfo:
    return QueueInfo(
        name=name,
        backend=backend,
        **{state: int(counts.get(state, 0)) for state in JOB_STATES},
    )


def to_worker_info(backend: str, record: WorkerRecord) -> WorkerInfo:
    return WorkerInfo(
        id=record.id,
        backend=backend,
        queue=record.queue,
        host=record.host,
        pid=record.pid,
        concurrency=record.concurrency,
        started_at=to_datetime(record.started_at),
        last_heartbeat=to_datetime(record.heartbeat_at),
        in_flight=record.in_flight,
        succeeded=record.succeeded,
        failed=record.failed,
    )
