"""What a running handler gets besides its job: lease control, progress and its log."""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ._audit import data_shape
from ._clock import to_datetime
from ._job_logs import JobJournal, check_message
from ._models import Job
from ._progress import publish_progress, seal_progress
from ._results import dependency_results
from ._validation import MAX_SECONDS_TEXT, is_duration
from .errors import BadArgumentError

if TYPE_CHECKING:
    from ._runtime import BackendRuntime

__all__ = ["JobContext", "LeaseState"]

#: A chatty handler may report progress often; the audit trail records at most one marker per
#: job per this many seconds (plus the first 100 %, once).
PROGRESS_AUDIT_INTERVAL = 1.0


@attrs.define(eq=False)
class LeaseState:
    """The live state of one held lease, shared by the handler's context and the heartbeat."""

    job_id: str
    token: str
    expires_at: float
    lost: bool = False
    cancelled: bool = False
    """The job was cancelled (``Queue.cancel``) while this lease held it."""
    progress: float = 0.0
    last_progress_audit: float = -math.inf
    completion_audited: bool = False


class JobContext:
    """Passed to every handler beside its :class:`Job`."""

    def __init__(
        self,
        job: Job,
        lease: LeaseState,
        runtime: BackendRuntime,
        journal: JobJournal | None = None,
    ) -> None:
        self.job = job
        self._lease = lease
        self._runtime = runtime
        self._journal = journal

    @property
    def lease_expires_at(self) -> datetime:
        return to_datetime(self._lease.expires_at)

    @property
    def lease_lost(self) -> bool:
        """True once the backend said another worker owns this job (the result will be
        counted ``stale``, not applied)."""
        return self._lease.lost

    @property
    def cancelled(self) -> bool:
        """True once the worker learnt that the job was cancelled (``Queue.cancel``).  An async
        handler is cancelled then; a plain ``def`` handler cannot be and may check this."""
        return self._lease.cancelled

    async def extend_lease(self, seconds: float) -> bool:
        """Keep the job ``seconds`` longer than its lease currently runs (at least ``seconds``
        from now).  Returns False when the lease was already lost."""
        if not is_duration(seconds, positive=True):
            raise BadArgumentError(
                "queue/bad-argument",
                f"extend_lease(seconds) needs a positive number of seconds, at most "
                f"{MAX_SECONDS_TEXT}, got {seconds!r}",
            )
        runtime = self._runtime
        target = max(self._lease.expires_at, runtime.clock.now()) + float(seconds)
        held = await runtime.call(
            "extend",
            lambda: runtime.backend.extend(
                [(self._lease.job_id, self._lease.token)], expires_at=target
            ),
        )
        if held and held[0]:
            self._lease.expires_at = target
            return True
        self._lease.lost = True
        if held and held[0] is None:
            self._lease.cancelled = True
        return False

    async def dependency_results(self) -> dict[str, Any]:
        """The results of the jobs this flow job depends on: ``{child name: value}`` (``{}``
        for a job outside a flow).  A dependency pruned after ``retain_done`` raises
        ``queue/job-not-found``; one whose value JSON could not hold, ``queue/bad-payload``."""
        return await dependency_results(self._runtime, self.job.id, self.job.flow_id)

    async def progress(self, percent: float, data: Any = None) -> None:
        """Report progress (0..100): a live event to every ``Queue.subscribe`` of this job,
        in any process (``data`` must be JSON with str keys, else ``queue/bad-payload``, and
        at most the backend's ``max_payload_bytes``, else ``queue/payload-too-large``), and a
        rate-limited marker in the audit trail.  The last one is also kept on the job
        (``JobInfo.progress``), stored at most once a second and when the handler ends."""
        if (
            isinstance(percent, bool)
            or not isinstance(percent, int | float)
            or not (0 <= percent <= 100)
        ):
            raise BadArgumentError(
                "queue/bad-argument",
                f"progress(percent) must be between 0 and 100, got {percent!r}",
            )
        self._lease.progress = float(percent)
        at = self._runtime.clock.now()
        event = seal_progress(self._runtime, self.job, percent, data, at)
        await publish_progress(self._runtime, self.job, event, at)
        if self._journal is not None:
            await self._journal.progress(event, at)
        events = self._runtime.events
        if events.wants("job.progress"):
            events.emit(
                "job.progress",
                queue=self.job.queue,
                backend=self._runtime.name,
                at=self._runtime.clock.now(),
                job_id=self.job.id,
                data={"percent": float(percent), "data": data},
            )
        now = self._runtime.clock.now()
        if percent >= 100:
            if self._lease.completion_audited:
                return
            self._lease.completion_audited = True
        elif now - self._lease.last_progress_audit < PROGRESS_AUDIT_INTERVAL:
            return
        self._lease.last_progress_audit = now
        await self._runtime.auditor.emit_job(
            "system.queue.progress",
            self.job,
            backend=self._runtime.name,
            # Progress data is the handler's own: the trail gets only its size (SPEC §6).
            data={"percent": float(percent), **data_shape(data)},
        )

    async def log(self, message: str) -> None:
        """Append ``message`` to the job's log, read with :meth:`Queue.job_logs
        <blamequeue.Queue.job_logs>` (sealed at rest; the last 1,000 lines are kept, each
        with its time and attempt).  ``message`` must be a ``str`` (else
        ``queue/bad-argument``); one over 4,096 characters is cut there and ends with
        ``...[truncated]``.  On a backend that keeps no records (``sqs``) the line is
        dropped, and a warning says so once."""
        if self._journal is None:
            check_message(message)
            return
        await self._journal.log(message)


class SyncJobContext:
    """The context a plain ``def`` handler gets in its worker thread: same methods, plain calls."""

    def __init__(self, context: JobContext) -> None:
        self._context = context
        self.job = context.job

    @property
    def lease_expires_at(self) -> datetime:
        return self._context.lease_expires_at

    @property
    def lease_lost(self) -> bool:
        return self._context.lease_lost

    @property
    def cancelled(self) -> bool:
        return self._context.cancelled

    def extend_lease(self, seconds: float) -> bool:
        return anyio.from_thread.run(self._context.extend_lease, seconds)

    def progress(self, percent: float, data: Any = None) -> None:
        anyio.from_thread.run(self._context.progress, percent, data)

    def dependency_results(self) -> dict[str, Any]:
        return anyio.from_thread.run(self._context.dependency_results)

    def log(self, message: str) -> None:
        anyio.from_thread.run(self._context.log, message)
