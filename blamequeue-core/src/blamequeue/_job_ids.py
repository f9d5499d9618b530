"""Ids chosen by the caller (SPEC §15): ``enqueue(..., job_id="order-42")``.

Enqueueing an id the backend already holds, in any state still stored, returns that id and
stores nothing (idempotent producers).  The backend decides it in one atomic step
(:meth:`blamequeue.abc.JobIds.enqueue_absent`); this module checks the id, refuses what cannot
be honoured, and audits an enqueue that found its id stored (the event of a deduplicated
unique enqueue, with ``data={"by": "job_id"}``).  It also checks ``lifo``.

The alphabet (ASCII letters, digits, ``-_.:@``) leaves out spaces (flow dependency lists are
space-separated), braces (Redis Cluster hash tags) and ``/`` and ``%`` (file names, URLs), so a
chosen id is as safe in every store as a generated ``"job-"`` + ULID one.
"""

from __future__ import annotations

import re
from typing import Any

from ._runtime import BackendRuntime
from ._uniqueness import DEDUPLICATED
from .abc import JobIds, NewJob
from .errors import BadArgumentError

__all__ = [
    "MAX_JOB_ID",
    "check_chosen_id",
    "check_lifo",
    "enqueue_chosen",
    "refuse_chosen_in_batch",
]

#: The longest chosen id (characters).
MAX_JOB_ID = 128

_ALLOWED = re.compile(r"[A-Za-z0-9_.:@-]+")


def check_chosen_id(value: Any) -> str:
    """``value`` when it is a valid chosen id, else ``queue/bad-argument``."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_JOB_ID
        or _ALLOWED.fullmatch(value) is None
    ):
        shown = value if not isinstance(value, str) else value[:60]
        raise BadArgumentError(
            "queue/bad-argument",
            f"job_id must be a string of 1 to {MAX_JOB_ID} ASCII letters, digits and '-_.:@' "
            f"(e.g. 'order-42'), got {shown!r}",
        )
    return value


def check_lifo(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadArgumentError(
            "queue/bad-argument", f"lifo must be True or False, got {type(value).__name__}"
        )
    return value


def refuse_chosen_in_batch(job_id: Any, where: str) -> None:
    """A batch of jobs takes no chosen id: one id cannot name several jobs."""
    if job_id is not None:
        raise BadArgumentError(
            "queue/bad-argument",
            f"{where} does not take job_id (one id would name every job of it); call "
            f"enqueue(..., job_id=...) once per job that needs its own id",
        )


async def enqueue_chosen(runtime: BackendRuntime, job: NewJob) -> bool:
    """Store ``job`` (whose id the caller chose) unless the backend holds its id; whether it
    was stored."""
    backend = JobIds.of(runtime.backend)
    (stored,) = await runtime.call("enqueue", lambda: backend.enqueue_absent([job]))
    if not stored:
        await runtime.auditor.emit(
            DEDUPLICATED,
            backend=runtime.name,
            queue=job.queue,
            job_id=job.id,
            trace_id=job.trace_id,
            classification=job.classification,
            data={"by": "job_id"},
        )
    return bool(stored)
