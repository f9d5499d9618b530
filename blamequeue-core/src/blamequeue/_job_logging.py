"""What every log record about a job carries besides its message: the job's id, queue,
attempt and backend as ``extra`` fields (``record.job_id``, ``record.queue``, ...), so a log
pipeline can filter and join on them (``blamequeue worker --log-format json`` writes them).

A record about several jobs at once (a batch of settlements refused, leases not renewed, a
sweep that found expired leases) carries ``job_ids``, ``count``, ``backend``, and ``queue``
when they are all on one queue (``queues`` when on several)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

__all__ = ["JOB_FIELDS", "MAX_LOGGED_IDS", "job_extra", "jobs_extra"]

JOB_FIELDS = ("job_id", "queue", "attempt", "backend")
"""The names of the fields, as they appear on a log record."""

MAX_LOGGED_IDS: Final = 100
"""At most this many ids in ``job_ids`` (the first ones); ``count`` is always all of them."""


class _JobLike(Protocol):
    """A stored job (:class:`~blamequeue.abc.StoredJob`) or a handler's :class:`Job`."""

    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempts(self) -> int: ...


def job_extra(backend: str, job: _JobLike) -> dict[str, Any]:
    """The ``extra`` of a log record about ``job`` of ``backend``; ``attempt`` is the number
    of the attempt, counting the one running (0 before the first)."""
    return {"job_id": job.id, "queue": job.queue, "attempt": job.attempts, "backend": backend}


def jobs_extra(
    backend: str | None,
    job_ids: Sequence[str],
    queues: Iterable[str],
    *,
    count: int | None = None,
) -> dict[str, Any]:
    """The ``extra`` of a log record about the jobs ``job_ids`` (at most
    :data:`MAX_LOGGED_IDS` of them listed) of ``backend`` (``None``: of several), on
    ``queues`` (each job's, or the one they share); ``count`` when more jobs are concerned
    than ``job_ids`` names (a backend that counts some without naming them)."""
    extra: dict[str, Any] = {
        "job_ids": list(job_ids[:MAX_LOGGED_IDS]),
        "count": len(job_ids) if count is None else count,
    }
    names = sorted(set(queues))
    if len(names) == 1:
        extra["queue"] = names[0]
    elif names:
        extra["queues"] = names
    if backend is not None:
        extra["backend"] = backend
    return extra
