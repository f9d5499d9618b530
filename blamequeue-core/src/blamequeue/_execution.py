"""Running one attempt and deciding its outcome: the one place the lifecycle rules of SPEC §3
live (retry with backoff or dead-letter, release on shutdown, settle and account).  Both
``consume`` and ``tick`` use it."""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import attrs

from ._audit import error_type
from ._backoff import Backoff, BackoffFunction, retry_delay
from ._batches import on_batch_job, skip_job
from ._clock import to_datetime
from ._context import JobContext, LeaseState, SyncJobContext
from ._flow_deaths import DLQ_WRITE_EVENT, audit_failed_dependants
from ._job_logging import job_extra, jobs_extra
from ._job_logs import JobJournal
from ._job_meta import JobMeta
from ._job_seals import error_place, last_error_of, open_context, payload_place_of
from ._models import DeadLetter, Job
from ._outcomes import RateLimited, RetryLater, UnrecoverableError
from ._rate_limited import note_rate_limit, share_rate_limit
from ._results import encode_result
from ._runtime import BackendRuntime
from ._tasks import TaskRegistry
from ._timeouts import run_within, timeout_error
from ._tracebacks import describe_error
from ._tracing import note_failure, traced_attempt
from ._validation import is_duration
from .abc import Lease, Settlement, StoredJob
from .errors import QueueError, SealKeyMissingError

__all__ = ["Attempt", "SettleCounts", "run_attempt", "settle", "to_dead_letter", "to_job"]

log = logging.getLogger("blamequeue")

Handler = Callable[[Job, Any], Any]


def to_job(runtime: BackendRuntime, stored: StoredJob, meta: JobMeta | None = None) -> Job:
    """The job a handler sees (``meta``: ``stored.meta`` parsed, when the caller has it).
    Raises ``queue/unseal-failed`` when its payload or context does not open for it (tampered
    with), :class:`SealKeyMissingError` when sealed with a key this process lacks."""
    if meta is None:
        meta = JobMeta.parse(stored.meta)
    # The payload first: its place covers the meta, so a rewritten task name fails here.
    payload = runtime.codec.decode_payload(stored.payload, payload_place_of(stored))
    return Job(
        id=stored.id,
        queue=stored.queue,
        payload=payload,
        priority=stored.priority,
        attempts=stored.attempts,
        max_attempts=stored.max_attempts,
        classification=stored.classification,
        trace_id=stored.trace_id,
        created_at=to_datetime(stored.created_at),
        available_at=to_datetime(stored.available_at),
        last_error=last_error_of(runtime.codec, stored),
        flow_id=stored.flow_id,
        task=meta.task,
        context=open_context(runtime.codec, meta.context, stored),
        group_key=stored.group_key,
    )


def to_dead_letter(runtime: BackendRuntime, stored: StoredJob) -> DeadLetter:
    try:
        payload = runtime.codec.decode_payload(stored.payload, payload_place_of(stored))
    except QueueError as exc:
        payload = None
        log.warning("dead job %s: %s", stored.id, exc, extra=job_extra(runtime.name, stored))
    return DeadLetter(
        job_id=stored.id,
        queue=stored.queue,
        payload=payload,
        attempts=stored.attempts,
        last_error=last_error_of(runtime.codec, stored),
        trace_id=stored.trace_id,
        classification=stored.classification,
        failed_at=to_datetime(stored.finished_at or stored.available_at),
    )


@attrs.define(eq=False)
class Attempt:
    """One leased job on its way through a handler."""

    lease: Lease
    state: LeaseState
    meta: JobMeta
    """The job's ``meta``, parsed once for the whole attempt."""
    settlement: Settlement | None = None
    error: str | None = None
    started_at: float | None = None
    """When the handler was started (the queue's clock), for the duration metrics."""
    backoff: Backoff | BackoffFunction | None = None
    """The backoff of the ``consume`` or ``tick`` that leased the job, if it gave one."""
    task_backoff: BackoffFunction | None = None
    """The backoff function of the job's registered task, once the task is looked up."""
    deferred: str | None = None
    """``"retry_later"`` or ``"rate_limited"`` when the handler deferred the job
    (:class:`~blamequeue.RetryLater`): its settlement gives the attempt back."""

    @classmethod
    def start(cls, lease: Lease, *, backoff: Backoff | BackoffFunction | None = None) -> Attempt:
        return cls(
            lease=lease,
            state=LeaseState(job_id=lease.job.id, token=lease.token, expires_at=lease.expires_at),
            meta=JobMeta.parse(lease.job.meta),
            backoff=backoff,
        )

    @property
    def job(self) -> StoredJob:
        return self.lease.job


def failure(
    runtime: BackendRuntime,
    attempt: Attempt,
    message: str,
    exc: BaseException | None = None,
    *,
    cause: BaseException | None = None,
) -> Settlement:
    """Retry with backoff while attempts remain, else dead-letter (at once for an
    :class:`~blamequeue.UnrecoverableError`).  ``exc`` is what the handler raised (logged with
    its traceback); ``cause``, for a failure the core decided (a timeout, an unknown task), is
    what a backoff function is given instead."""
    stored = attempt.job
    now = runtime.clock.now()
    error = runtime.codec.encode_error(message, error_place(stored))
    attempt.error = message
    note_failure(exc or cause)
    unrecoverable = isinstance(exc, UnrecoverableError)
    retrying = stored.attempts < stored.max_attempts and not unrecoverable
    if retrying:
        what_next = "it will be retried"
    elif unrecoverable:
        what_next = "it is unrecoverable and goes to the dead-letter queue"
    else:
        what_next = "it goes to the dead-letter queue"
    # The job records the error; the operator watching the worker should see it too.
    log.warning(
        "job %s on %r failed (attempt %d of %d), %s: %s",
        stored.id,
        stored.queue,
        stored.attempts,
        stored.max_attempts,
        what_next,
        message.split("\n", 1)[0],
        exc_info=exc,
        extra=job_extra(runtime.name, stored),
    )
    if retrying:
        delay = retry_delay(
            attempt=stored.attempts,
            job_id=stored.id,
            log_extra=job_extra(runtime.name, stored),
            error=exc or cause or RuntimeError(message.split("\n", 1)[0]),
            own=attempt.meta.backoff,
            task=attempt.task_backoff,
            worker=attempt.backoff,
            backend=runtime.backoff,
        )
        return Settlement(
            job_id=stored.id,
            token=attempt.lease.token,
            outcome="retry",
            at=now + delay,
            error=error,
        )
    return Settlement(
        job_id=stored.id, token=attempt.lease.token, outcome="dead", at=now, error=error
    )


def raised(runtime: BackendRuntime, attempt: Attempt, exc: BaseException) -> Settlement:
    """The settlement of a handler that raised ``exc``: deferred for a
    :class:`~blamequeue.RetryLater` (or :class:`~blamequeue.RateLimited`), else a failure."""
    if isinstance(exc, RetryLater):
        seconds = getattr(exc, "seconds", None)
        if is_duration(seconds):
            return defer(runtime, attempt, exc, float(seconds))  # type: ignore[arg-type]
        # Made valid, then changed: an ordinary failure that says why.
        message = (
            f"{type(exc).__name__}.seconds must be a finite number from 0 to 10 years, "
            f"got {seconds!r}\n{describe_error(exc)}"
        )
        return failure(runtime, attempt, message, exc)
    return failure(runtime, attempt, describe_error(exc), exc)


def defer(runtime: BackendRuntime, attempt: Attempt, exc: RetryLater, seconds: float) -> Settlement:
    """Back to pending ``seconds`` from now with the attempt given back (a ``release`` due
    later); a :class:`~blamequeue.RateLimited` also pauses the queue's consumers here at once
    (the pause is shared with other processes once settled)."""
    stored = attempt.job
    now = runtime.clock.now()
    rate_limited = isinstance(exc, RateLimited)
    attempt.deferred = "rate_limited" if rate_limited else "retry_later"
    if rate_limited:
        note_rate_limit(runtime, stored.queue, now + seconds)
    log.info(
        "job %s on %r deferred by its handler (%s): due again in %g s, the attempt given back",
        stored.id,
        stored.queue,
        type(exc).__name__,
        seconds,
        extra=job_extra(runtime.name, stored),
    )
    return Settlement(
        job_id=stored.id, token=attempt.lease.token, outcome="release", at=now + seconds
    )


def release(runtime: BackendRuntime, attempt: Attempt) -> Settlement:
    return Settlement(
        job_id=attempt.job.id,
        token=attempt.lease.token,
        outcome="release",
        at=runtime.clock.now(),
    )


@traced_attempt
async def run_attempt(runtime: BackendRuntime, attempt: Attempt, handler: Handler) -> Settlement:
    """Run the handler once and return the settlement to apply.

    A job enqueued with a ``timeout`` is cancelled once it runs longer (on the queue's clock)
    and fails like a raising handler.  Cancellation from outside is not caught here: the
    caller decides (shutdown releases the job).
    """
    attempt.started_at = runtime.clock.now()
    if runtime.events.wants("job.processing"):
        job = attempt.job
        runtime.events.emit(
            "job.processing",
            queue=job.queue,
            backend=runtime.name,
            at=attempt.started_at,
            job_id=job.id,
            data={"attempts": job.attempts},
        )
    seconds = attempt.meta.timeout
    if seconds is None:
        return await _run_handler(runtime, attempt, handler)
    expired, settlement = await run_within(
        runtime.clock, seconds, lambda: _run_handler(runtime, attempt, handler)
    )
    if expired or settlement is None:
        # A thread handler is abandoned, not stopped: whatever it returns later is dropped.
        message = timeout_error(seconds)
        return failure(runtime, attempt, message, cause=TimeoutError(message))
    return settlement


async def _run_handler(runtime: BackendRuntime, attempt: Attempt, handler: Handler) -> Settlement:
    if attempt.meta.batch is not None and await skip_job(runtime, attempt.meta.batch):
        # Its batch was cancelled: done without running (the batch counts it processed).
        return Settlement(
            job_id=attempt.job.id,
            token=attempt.lease.token,
            outcome="done",
            at=runtime.clock.now(),
            keep=runtime.keeps_done,
        )
    try:
        job = to_job(runtime, attempt.job, attempt.meta)
    except SealKeyMissingError as exc:
        # Not the job's fault but this process's: hand it back untouched (the attempt given
        # back) and stop leasing here, so a worker missing a key never drains the queue.
        runtime.seal_key_missing(exc, attempt.job)
        return release(runtime, attempt)
    except QueueError as exc:
        # An unreadable row can never succeed: straight to the DLQ, the worker lives on.
        attempt.error = f"{exc.code}: {exc.message}"
        return Settlement(
            job_id=attempt.job.id,
            token=attempt.lease.token,
            outcome="dead",
            at=runtime.clock.now(),
            error=runtime.codec.encode_error(attempt.error, error_place(attempt.job)),
        )
    if isinstance(handler, TaskRegistry):
        try:
            task = handler.task_for(job)
        except QueueError as exc:
            # A worker without the task's code (a deploy in progress?): retried, then the DLQ.
            return failure(runtime, attempt, f"{exc.code}: {exc.message}", cause=exc)
        handler = task.job_handler()
        attempt.task_backoff = task.settings.backoff_function
    journal = JobJournal(runtime, attempt.job)
    settlement = await _call_handler(
        runtime, attempt, handler, job, JobContext(job, attempt.state, runtime, journal)
    )
    # The progress reported last in a burst is kept once the handler is over (not when the
    # attempt is cancelled: timed out or shut down).
    await journal.flush()
    return settlement


async def _call_handler(
    runtime: BackendRuntime, attempt: Attempt, handler: Handler, job: Job, context: JobContext
) -> Settlement:
    try:
        if _is_async(handler):
            value = await handler(job, context)
        else:
            call = functools.partial(_call_catching, handler, job, SyncJobContext(context))
            result, thrown = await anyio.to_thread.run_sync(
                call, abandon_on_cancel=True, limiter=runtime.sync_handler_limiter()
            )
            if thrown is not None:
                # Handed over as a value: re-raised here, a GeneratorExit from the thread would
                # be taken by asyncio as the end of this task.
                return raised(runtime, attempt, thrown)
            value = await result if inspect.isawaitable(result) else result
    except anyio.get_cancelled_exc_class():
        raise
    except BaseException as exc:
        return raised(runtime, attempt, exc)
    keep = runtime.keeps_done
    return Settlement(
        job_id=attempt.job.id,
        token=attempt.lease.token,
        outcome="done",
        at=runtime.clock.now(),
        keep=keep,
        result=(
            None
            if value is None or not keep
            else encode_result(
                runtime.codec,
                value,
                job.queue,
                job.id,
                max_bytes=runtime.max_payload_bytes,
                log_extra=job_extra(runtime.name, job),
            )
        ),
    )


def _call_catching(
    handler: Handler, job: Job, context: SyncJobContext
) -> tuple[Any, BaseException | None]:
    try:
        return handler(job, context), None
    except BaseException as exc:
        return None, exc


def _is_async(handler: Handler) -> bool:
    # Asked for every job; inspect's answer costs more than a no-op handler's run.
    try:
        return _async_handlers[handler]
    except KeyError:
        answer = _async_handlers[handler] = _inspect_async(handler)
        return answer
    except TypeError:  # an unhashable callable object
        return _inspect_async(handler)


_async_handlers: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _inspect_async(handler: Handler) -> bool:
    target = handler
    while isinstance(target, functools.partial):
        target = target.func
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - async callable objects
    )


@attrs.define
class SettleCounts:
    """How the settlements of a batch ended; each job counts once."""

    succeeded: int = 0
    failed: int = 0
    stale: int = 0
    unsettled: int = 0
    moved_to_dlq: int = 0
    released: int = 0
    deferred: int = 0
    """Jobs their handler deferred (:class:`~blamequeue.RetryLater`), the attempt given back."""


async def settle(
    runtime: BackendRuntime, attempts: Sequence[Attempt], counts: SettleCounts
) -> None:
    """Apply the settlements of ``attempts`` in one backend call and account for them."""
    batch = [a for a in attempts if a.settlement is not None]
    if not batch:
        return
    settlements = [a.settlement for a in batch if a.settlement is not None]
    try:
        applied = await runtime.call(
            "settle",
            lambda: runtime.backend.settle(settlements, now=runtime.clock.now()),
        )
    except QueueError as exc:
        # The backend would not record the outcomes: the jobs stay inflight and come back after
        # their lease.  Worth an alert, so log loudly.
        log.error(
            "backend %r refused to settle %d job(s) (%s); they return after their lease",
            runtime.name,
            len(batch),
            exc,
            extra=jobs_extra(runtime.name, [a.job.id for a in batch], [a.job.queue for a in batch]),
        )
        for a in batch:
            if a.settlement is not None and a.settlement.outcome == "release" and not a.deferred:
                counts.released += 1
            else:
                counts.unsettled += 1
        await _share_rate_limits(runtime, batch)
        return
    for a, ok in zip(batch, applied, strict=True):
        outcome = a.settlement.outcome if a.settlement else "done"
        if outcome == "release" and not a.deferred:
            counts.released += 1
            continue
        if not ok:
            counts.stale += 1
            continue
        if a.deferred:
            counts.deferred += 1
            # Due again later: idle consumers here wait for it (or for the pause's end).
            runtime.notify(a.job.queue)
            if runtime.events.wants("job.retrying"):
                emit_deferred(runtime, a)
            continue
        observe(runtime, a, outcome)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %s on %r settled: %s",
                a.job.id,
                a.job.queue,
                _SETTLED[outcome],
                extra=job_extra(runtime.name, a.job),
            )
        if outcome in ("done", "dead") and a.meta.batch is not None:
            await _count_in_batch(runtime, a, outcome)
        emit_settled(runtime, a, outcome)
        if a.job.flow_id is not None and outcome in ("done", "dead"):
            # Its end may have released parked siblings (a dead one those that ignore it),
            # on any queue of the flow: wake idle consumers.
            runtime.notify_flow(a.job, a.meta)
        if outcome == "done":
            counts.succeeded += 1
            continue
        counts.failed += 1
        if outcome == "retry":
            # Its backoff may end before the idle consumers here would look again.
            runtime.notify(a.job.queue)
        if outcome == "dead":
            counts.moved_to_dlq += 1
            await emit_dead(runtime, a.job, a.error)
            await audit_failed_dependants(runtime, a.job, _finished_at(runtime, a, outcome))
    await _share_rate_limits(runtime, batch)


async def _share_rate_limits(runtime: BackendRuntime, batch: Sequence[Attempt]) -> None:
    """Tell the other processes of the pauses ``RateLimited`` raises asked for: whether or not
    the job's own settlement was applied, the service said "too many requests"."""
    for a in batch:
        if a.deferred == "rate_limited" and a.settlement is not None:
            await share_rate_limit(runtime, a.job.queue, a.settlement.at)


async def _count_in_batch(runtime: BackendRuntime, attempt: Attempt, outcome: str) -> None:
    try:
        await on_batch_job(runtime, attempt.job, attempt.meta.batch, outcome, attempt.error)
    except QueueError as exc:
        # The job's own settlement is stored; its batch misses this count (logged loudly).
        log.error(
            "batch of job %s not updated: %s",
            attempt.job.id,
            exc,
            extra=job_extra(runtime.name, attempt.job),
        )


def _finished_at(runtime: BackendRuntime, attempt: Attempt, outcome: str) -> float:
    # A retry's settlement time is when the job is due again, not when this attempt ended.
    settlement = attempt.settlement
    if settlement is None or outcome == "retry":
        return runtime.clock.now()
    return settlement.at


_EVENT_OF = {"done": "job.completed", "retry": "job.retrying", "dead": "job.dead"}
_SETTLED = {"done": "succeeded", "retry": "failed, to be retried", "dead": "sent to the DLQ"}


def emit_deferred(runtime: BackendRuntime, attempt: Attempt) -> None:
    """``job.retrying`` for a job its handler deferred: no error, the attempt given back."""
    job, settlement = attempt.job, attempt.settlement
    assert settlement is not None
    runtime.events.emit(
        "job.retrying",
        queue=job.queue,
        backend=runtime.name,
        at=runtime.clock.now(),
        job_id=job.id,
        data={
            "attempts": max(job.attempts - 1, 0),
            "retry_at": settlement.at,
            "deferred": attempt.deferred,
        },
    )


def emit_settled(runtime: BackendRuntime, attempt: Attempt, outcome: str) -> None:
    """``job.completed``; or, for a failure, ``job.failed`` then ``job.retrying`` or (the last
    one) ``job.dead`` (SPEC §15)."""
    events = runtime.events
    name = _EVENT_OF[outcome]
    failed = outcome != "done" and events.wants("job.failed")
    if not failed and not events.wants(name):
        return
    job, settlement = attempt.job, attempt.settlement
    data: dict[str, Any] = {"attempts": job.attempts}
    at = _finished_at(runtime, attempt, outcome)
    if outcome != "done":
        data["error"] = attempt.error
        if failed:
            events.emit(
                "job.failed",
                queue=job.queue,
                backend=runtime.name,
                at=at,
                job_id=job.id,
                data={**data, "dead": outcome == "dead"},
            )
    if outcome == "retry" and settlement is not None:
        data["retry_at"] = settlement.at
    events.emit(name, queue=job.queue, backend=runtime.name, at=at, job_id=job.id, data=data)


def observe(runtime: BackendRuntime, attempt: Attempt, outcome: str) -> None:
    """Tally an applied settlement for the backend-kept metrics (flushed off the hot path)."""
    at = _finished_at(runtime, attempt, outcome)
    runtime.metrics.observe(
        queue=attempt.job.queue,
        job_id=attempt.job.id,
        outcome=outcome,
        at=at,
        duration=None if attempt.started_at is None else at - attempt.started_at,
        attempts=attempt.job.attempts,
        error=attempt.error,
    )


async def emit_dead(runtime: BackendRuntime, stored: StoredJob, error: str | None) -> None:
    await runtime.auditor.emit_job(
        DLQ_WRITE_EVENT,
        stored,
        backend=runtime.name,
        # The error text may quote payload data; the audit trail gets only its type.
        data={"attempts": stored.attempts, "error_type": error_type(error)},
    )
