"""Editing a waiting job, and running a finished one again, by id (SPEC §15): ``Queue.promote``,
``change_delay``, ``change_priority``, ``update_payload`` and ``rerun``.

The core checks the arguments (as ``enqueue`` does) before anything reaches the backend; the
backend then applies each edit in one atomic step conditional on the job's state
(:class:`~blamequeue.abc.JobEdits`), so an edit never lands on a job a worker has leased.  A job
that an edit makes due, or due sooner, wakes this process's idle consumers here; the backend
wakes those of other processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._codec import dumps
from ._inspection import check_job_id
from ._job_seals import payload_place_of
from ._validation import check_delay, check_priority
from .abc import EditOutcome, JobEdits, StoredJob
from .errors import BackendUnavailableError, BadArgumentError, NotFoundError

if TYPE_CHECKING:
    from ._runtime import BackendRuntime

__all__ = [
    "DELAY_CHANGED_EVENT",
    "PAYLOAD_UPDATED_EVENT",
    "PRIORITY_CHANGED_EVENT",
    "PROMOTED_EVENT",
    "RERUN_EVENT",
    "change_delay",
    "change_priority",
    "promote",
    "rerun",
    "update_payload",
]

PROMOTED_EVENT = "system.job.promoted"
DELAY_CHANGED_EVENT = "system.job.delay.changed"
PRIORITY_CHANGED_EVENT = "system.job.priority.changed"
PAYLOAD_UPDATED_EVENT = "system.job.payload.updated"
RERUN_EVENT = "system.job.rerun"
"""The audit event of a ``done`` or ``cancelled`` job run again; a ``dead`` one is audited as
``dlq_retry`` audits it (``system.queue.dlq.retry``)."""
_DLQ_RETRY_EVENT = "system.queue.dlq.retry"

#: How often ``update_payload`` reads the job again when its place changed under it (a job
#: purged and enqueued again under the same id between the read and the write).
_PLACE_ATTEMPTS = 3

#: The states whose job an edit of its payload or priority may change.
_EDITABLE = ("pending", "parked")


def _editing(runtime: BackendRuntime, job_id: Any) -> JobEdits:
    """The backend as :class:`JobEdits` once ``job_id`` is checked, or the clear refusal."""
    check_job_id(job_id)
    if not runtime.backend.capabilities.job_edits:
        raise runtime.unsupported(
            "queue/job-edits-unsupported",
            "cannot edit or rerun a job by id; edit jobs on a backend whose capabilities "
            "include job_edits ('local', 'redis', 'memory'), or cancel the job and enqueue a "
            "new one",
        )
    return JobEdits.of(runtime.backend)


def _not_found(runtime: BackendRuntime, job_id: str) -> NotFoundError:
    return NotFoundError(
        "queue/job-not-found",
        f"backend {runtime.name!r} holds no job {job_id!r}: the id is unknown, or the job was "
        f"purged, or it finished and was pruned after retain_done",
    )


async def _apply(
    runtime: BackendRuntime,
    job_id: str,
    operation: str,
    edit: Callable[[], Awaitable[EditOutcome | None]],
) -> EditOutcome:
    outcome = await runtime.call(operation, edit)
    if outcome is None:
        raise _not_found(runtime, job_id)
    return outcome


async def _audit(
    runtime: BackendRuntime, event: str, job: StoredJob, data: dict[str, Any] | None = None
) -> None:
    await runtime.auditor.emit_job(event, job, backend=runtime.name, data=data)


async def promote(runtime: BackendRuntime, job_id: str) -> bool:
    """Make a delayed job due now: True when it was delayed, False when it was already due or
    not pending."""
    backend = _editing(runtime, job_id)
    outcome = await _apply(
        runtime, job_id, "promote", lambda: backend.promote(job_id, now=runtime.clock.now())
    )
    if not outcome.applied:
        return False
    runtime.notify(outcome.job.queue)
    await _audit(runtime, PROMOTED_EVENT, outcome.job)
    return True


async def change_delay(runtime: BackendRuntime, job_id: str, seconds: Any) -> bool:
    """Make a pending job due ``seconds`` from now."""
    backend = _editing(runtime, job_id)
    delay = check_delay(seconds)
    if delay > 0 and not runtime.backend.capabilities.delay:
        raise BadArgumentError(
            "queue/bad-argument",
            f"backend {runtime.name!r} (protocol {runtime.protocol!r}) cannot delay jobs",
        )

    def edit() -> Awaitable[EditOutcome | None]:
        now = runtime.clock.now()
        return backend.change_delay(job_id, available_at=now + delay, now=now)

    outcome = await _apply(runtime, job_id, "change_delay", edit)
    if not outcome.applied:
        return False
    # Sooner or later: an idle consumer asks again when the queue's next job is due.
    runtime.notify(outcome.job.queue)
    await _audit(runtime, DELAY_CHANGED_EVENT, outcome.job, {"delay": delay})
    return True


async def change_priority(runtime: BackendRuntime, job_id: str, priority: Any) -> bool:
    """Give a pending or parked job another priority."""
    backend = _editing(runtime, job_id)
    value = check_priority(priority)
    if value != 0 and not runtime.backend.capabilities.priority:
        raise BadArgumentError(
            "queue/bad-argument",
            f"backend {runtime.name!r} (protocol {runtime.protocol!r}) has no priorities; "
            f"leave priority at 0",
        )
    outcome = await _apply(
        runtime,
        job_id,
        "change_priority",
        lambda: backend.change_priority(job_id, priority=value),
    )
    if not outcome.applied:
        return False
    await _audit(runtime, PRIORITY_CHANGED_EVENT, outcome.job, {"priority": value})
    return True


async def update_payload(runtime: BackendRuntime, job_id: str, payload: Any) -> bool:
    """Replace the payload of a pending or parked job, checked and sealed as ``enqueue``
    does: sealed for the job's place (queue, id, flow, ``meta``), read from the store first."""
    backend = _editing(runtime, job_id)
    text = dumps(payload, runtime.max_payload_bytes)
    for _ in range(_PLACE_ATTEMPTS):
        stored = await runtime.call("get_job", lambda: backend.get_job(job_id))
        if stored is None:
            raise _not_found(runtime, job_id)
        if stored.state not in _EDITABLE:
            return False
        replace = _replacing(runtime, backend, text, stored)
        outcome = await _apply(runtime, job_id, "update_payload", replace)
        if outcome.applied:
            await _audit(runtime, PAYLOAD_UPDATED_EVENT, outcome.job)
            return True
        if outcome.job.state not in _EDITABLE or _place(outcome.job) == _place(stored):
            return False  # leased or finished meanwhile
    raise BackendUnavailableError(
        f"backend {runtime.name!r}: job {job_id!r} kept being replaced while its payload was "
        f"updated; try again"
    )


def _place(job: StoredJob) -> tuple[str, str | None, str | None]:
    return job.queue, job.flow_id, job.meta


def _replacing(
    runtime: BackendRuntime, backend: JobEdits, text: str, stored: StoredJob
) -> Callable[[], Awaitable[EditOutcome | None]]:
    """The backend call replacing ``stored``'s payload with ``text``, sealed (as at enqueue)
    for the place ``stored`` has: its queue, id, flow and ``meta``."""
    codec = runtime.codec
    sealed = codec.seal_text(text, payload_place_of(stored)) if codec.sealed else text
    return lambda: backend.update_payload(
        stored.id, sealed, queue=stored.queue, flow_id=stored.flow_id, meta=stored.meta
    )


async def rerun(runtime: BackendRuntime, job_id: str) -> bool:
    """Put a done, dead or cancelled job back to pending with its attempts reset."""
    backend = _editing(runtime, job_id)
    outcome = await _apply(
        runtime, job_id, "rerun", lambda: backend.rerun(job_id, now=runtime.clock.now())
    )
    if not outcome.applied:
        return False
    runtime.notify(outcome.job.queue)
    if outcome.was == "dead":
        await _audit(runtime, _DLQ_RETRY_EVENT, outcome.job)
    else:
        await _audit(runtime, RERUN_EVENT, outcome.job, {"from": outcome.was})
    return True
