"""Cancelling a job by id (``Queue.cancel``), and how a worker learns of it.

The backend cancels in one atomic step, whatever state the job is in: a pending, delayed or
parked job simply ends ``cancelled``; a running one ends ``cancelled`` too, at once, and its
lease is fenced (the old token can settle nothing).  The worker running it finds out at its
next heartbeat, when renewing the lease answers ``None`` instead of ``True``, and cancels that
handler's scope.  So the job's state never waits for the worker, and a worker that died, or a
handler that finished meanwhile, changes nothing: its settlement is counted ``stale``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from ._flow_deaths import audit_failed_dependants
from ._inspection import check_job_id
from .abc import Cancellation
from .errors import NotFoundError

if TYPE_CHECKING:
    from ._context import LeaseState
    from ._runtime import BackendRuntime

__all__ = ["CANCELLED_EVENT", "cancel_job", "stop_cancelled"]

CANCELLED_EVENT = "system.job.cancelled"
"""The audit event of a job cancelled by ``Queue.cancel``."""


async def cancel_job(runtime: BackendRuntime, job_id: str) -> bool:
    """Cancel ``job_id`` on ``runtime``'s backend: True when this call cancelled it (it was
    pending, delayed, parked or running), False when it had already finished."""
    check_job_id(job_id)
    if not runtime.backend.capabilities.cancel:
        raise runtime.unsupported(
            "queue/cancel-unsupported",
            "cannot cancel a job by id; cancel jobs on a backend whose capabilities include "
            "cancel ('local', 'memory', 'redis'), or make the handler skip the job",
        )
    backend = Cancellation.of(runtime.backend)
    outcome = await runtime.call("cancel", lambda: backend.cancel(job_id, now=runtime.clock.now()))
    if outcome is None:
        raise NotFoundError(
            "queue/job-not-found",
            f"backend {runtime.name!r} holds no job {job_id!r}: the id is unknown, or the job "
            f"was purged, or it finished and was pruned after retain_done",
        )
    if not outcome.cancelled:
        return False
    stored = outcome.job
    if stored.flow_id is not None:  # children that ignore it may have been released
        runtime.notify_flow(stored)
    await runtime.auditor.emit_job(
        CANCELLED_EVENT, stored, backend=runtime.name, data={"attempts": stored.attempts}
    )
    await audit_failed_dependants(runtime, stored, stored.finished_at or runtime.clock.now())
    return True


def stop_cancelled(lease: LeaseState, scope: anyio.CancelScope | None) -> None:
    """The backend said ``lease``'s job was cancelled: stop its handler.  Nothing is settled
    afterwards (the job is already ``cancelled``); the attempt counts as ``stale``."""
    lease.lost = True
    lease.cancelled = True
    if scope is not None:
        scope.cancel()
