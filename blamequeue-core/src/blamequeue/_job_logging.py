"""What every log record about a job carries besides its message: the job's id, queue,
attempt and backend as ``extra`` fields (``record.job_id``, ``record.queue``, ...), so a log
pipeline can filter and join on them (``blamequeue worker --log-format json`` writes them)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["JOB_FIELDS", "job_extra"]

JOB_FIELDS = ("job_id", "queue", "attempt", "backend")
"""The names of the fields, as they appear on a log record."""


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
