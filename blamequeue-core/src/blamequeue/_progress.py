"""Live progress events (SPEC §10): what ``ctx.progress`` publishes and ``Queue.subscribe``
yields, across processes through the backend (``Backend.publish_progress`` /
``Backend.watch_job``).  Events are live: a subscriber sees those published after it
subscribed, then one final event when the job ends.  The last one is also kept on the job
(:mod:`._job_logs`, ``JobInfo.progress``) for readers that come later.

On the wire an event is ``{"percent": p, "data": d, "at": t}`` through the backend's codec
(sealed like payloads: progress data may be as private as the payload it describes).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ._clock import to_datetime
from ._codec import dumps, job_place
from ._job_logging import job_extra
from ._job_seals import last_error_of
from ._results import LIVE_STATES, POLL_MAX, get_stored, not_found
from .abc import JobEvents, JobWatch, StoredJob
from .errors import BadArgumentError, QueueError, ResultTimeoutError

if TYPE_CHECKING:
    from ._models import Job
    from ._runtime import BackendRuntime

__all__ = ["JobEvent", "Subscription", "open_progress", "publish_progress", "seal_progress"]

log = logging.getLogger("blamequeue")


@attrs.frozen(kw_only=True)
class JobEvent:
    """One event of :meth:`Queue.subscribe <blamequeue.Queue.subscribe>`.

    * ``kind="progress"``: a handler called ``ctx.progress(percent, data)``; ``at`` is when.
    * ``kind="finished"`` (always the last event): the job ended.  ``state`` is its end state
      (``"done"``, ``"dead"``, ...), or ``None`` when the job vanished instead (deleted on
      completion with ``retain_done=0``, or purged); ``error`` is its last error when it
      failed.  Read a ``done`` job's value with :meth:`Queue.result <blamequeue.Queue.result>`.
    """

    job_id: str
    kind: Literal["progress", "finished"]
    percent: float | None = None
    data: Any = None
    at: datetime | None = None
    state: str | None = None
    error: str | None = None

    @property
    def final(self) -> bool:
        """True for the last event, the one saying the job ended."""
        return self.kind == "finished"


def progress_place(queue: str, job_id: str) -> bytes:
    """Where a job's sealed progress event belongs."""
    return job_place("progress", queue, job_id)


def seal_progress(runtime: BackendRuntime, job: Job, percent: float, data: Any, now: float) -> str:
    """One progress event, sealed for its job: what is published and what is kept."""
    # Encoded on every backend, so data JSON cannot hold (or over max_payload_bytes) fails
    # the same way everywhere.
    text = dumps({"percent": float(percent), "data": data, "at": now}, runtime.max_payload_bytes)
    return runtime.codec.seal_text(text, progress_place(job.queue, job.id))


def open_progress(runtime: BackendRuntime, event: str, queue: str, job_id: str) -> Any:
    """The body of a sealed progress event: ``{"percent", "data", "at"}``; raises
    ``queue/unseal-failed`` (or a missing key) as the codec does."""
    return runtime.codec.decode_payload(event, progress_place(queue, job_id))


async def publish_progress(runtime: BackendRuntime, job: Job, event: str, now: float) -> None:
    """Hand one sealed progress event to the backend for subscribers in any process.  Best
    effort: a backend that cannot publish it just logs, the handler carries on."""
    backend = runtime.backend
    if not isinstance(backend, JobEvents):
        return
    try:
        await backend.publish_progress(job.id, event, now=now)
    except QueueError as exc:
        log.debug(
            "progress event of job %s not published: %s",
            job.id,
            exc,
            extra=job_extra(runtime.name, job),
        )


class Subscription:
    """What :meth:`Queue.subscribe <blamequeue.Queue.subscribe>` returns: an async context
    manager that subscribes (``async with``) and an async iterator of :class:`JobEvent` that
    ends after the ``finished`` event::

        async with queue.subscribe(job_id) as events:
            async for event in events:
                ...
    """

    def __init__(self, runtime: BackendRuntime, job_id: str, timeout: float) -> None:
        self._runtime = runtime
        self.job_id = job_id
        self._timeout = timeout
        self._stack: AsyncExitStack | None = None
        self._watch: JobWatch | None = None
        self._last: StoredJob | None = None
        self._checked_at = 0.0
        self._deadline = 0.0
        self._finished = False

    async def __aenter__(self) -> Subscription:
        runtime = self._runtime
        caps = runtime.backend.capabilities
        if not (caps.progress_events and caps.inspection):
            raise runtime.unsupported(
                "queue/results-unsupported",
                "cannot carry progress events between processes; subscribe on a backend whose "
                "capabilities include progress_events (e.g. 'local', 'redis', 'memory')",
            )
        stack = AsyncExitStack()
        try:
            # Subscribe first, then look: nothing published after the look is missed.
            self._watch = await stack.enter_async_context(runtime.backend.watch_job(self.job_id))
            stored = await get_stored(runtime, self.job_id)
            if stored is None:
                raise not_found(runtime, self.job_id)
        except BaseException:
            await stack.aclose()
            raise
        self._stack, self._last = stack, stored
        now = runtime.clock.now()
        self._checked_at, self._deadline = now, now + self._timeout
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> JobEvent:
        watch = self._watch
        if watch is None or self._stack is None:
            if self._finished:
                raise StopAsyncIteration
            raise BadArgumentError(
                "queue/bad-argument",
                "iterate a subscription inside `async with queue.subscribe(job_id) as events:`",
            )
        if self._finished:
            raise StopAsyncIteration
        clock = self._runtime.clock
        while True:
            last = self._last
            if last is None or last.state not in LIVE_STATES:
                # The job ended: an event it published after the watch last looked (and
                # before this read of its state) is still to come.  Ask for what is there,
                # without waiting, until nothing is left; then the final event.
                event = await watch.next_event(0)
                if event is not None:
                    progress = self._progress(event)
                    if progress is not None:
                        return progress
                    continue
                self._finished = True
                return self._final(last)
            now = clock.now()
            if now >= self._deadline:
                raise ResultTimeoutError(
                    "queue/result-timeout",
                    f"job {self.job_id!r} did not finish within {self._timeout:g} s of "
                    f"subscribing (it is {last.state}); subscribe again to keep listening",
                )
            wait = min(self._deadline, self._checked_at + POLL_MAX) - now
            event = await watch.next_event(wait) if wait > 0 else None
            if event is not None:
                progress = self._progress(event)
                if progress is not None:
                    return progress
                continue
            self._last = await get_stored(self._runtime, self.job_id)
            self._checked_at = clock.now()

    def _progress(self, event: str) -> JobEvent | None:
        try:
            queue = self._last.queue if self._last is not None else ""
            body = open_progress(self._runtime, event, queue, self.job_id)
            return JobEvent(
                job_id=self.job_id,
                kind="progress",
                percent=float(body["percent"]),
                data=body.get("data"),
                at=to_datetime(float(body["at"])),
            )
        except (QueueError, KeyError, TypeError, ValueError) as exc:
            # Another process sealing with a key this one lacks, say: skip, keep listening.
            log.warning(
                "unreadable progress event for job %s skipped: %s",
                self.job_id,
                exc,
                extra={} if self._last is None else job_extra(self._runtime.name, self._last),
            )
            return None

    def _final(self, stored: StoredJob | None) -> JobEvent:
        if stored is None:
            return JobEvent(job_id=self.job_id, kind="finished")
        error = None
        if stored.state != "done":
            error = last_error_of(self._runtime.codec, stored)
        return JobEvent(
            job_id=self.job_id,
            kind="finished",
            state=stored.state,
            error=error,
            at=None if stored.finished_at is None else to_datetime(stored.finished_at),
        )
