"""Lateness for ``blamequeue bench``: how long after its due time a delayed job or a backoff retry
starts on an idle consumer with the default ``poll_interval`` (SPEC §3 item 13: within 50 ms on
a backend that holds delays itself).

Each sample is the handler's start (``time.time()``, the clock of every process of the machine
and of a queue on its default clock) minus the job's ``available_at``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio

from blamequeue import Job, Queue

__all__ = [
    "DELAYED_JOBS",
    "LATE_QUEUE",
    "RETRIED_JOBS",
    "RETRY_BACKOFF",
    "delayed_delays",
    "delayed_lateness",
    "delayed_lateness_elsewhere",
    "lateness_of",
    "retry_lateness",
]

#: Delayed jobs per measurement, due 0.1 to 0.6 s after they are enqueued.
DELAYED_JOBS = 30
#: Jobs that fail once, then wait :data:`RETRY_BACKOFF` seconds for their retry.
RETRIED_JOBS = 20
RETRY_BACKOFF = 0.3
#: The queue a worker process of the bench consumes for the lateness seen from another process.
LATE_QUEUE = "bench-late-process"
_WAIT = 60.0


def delayed_delays() -> list[float]:
    """The delays of the delayed jobs: spread evenly over 0.1 to 0.6 s."""
    return [0.1 + 0.5 * n / (DELAYED_JOBS - 1) for n in range(DELAYED_JOBS)]


def lateness_of(job: Job) -> float:
    """Seconds from ``job``'s due time to now."""
    return time.time() - job.available_at.timestamp()


class _Samples:
    """The lateness of ``count`` job starts, and an event set once all are in."""

    def __init__(self, count: int, on_sample: Callable[[], None]) -> None:
        self.count = count
        self.on_sample = on_sample
        self.late: list[float] = []
        self.done = anyio.Event()

    def add(self, job: Job) -> None:
        self.late.append(lateness_of(job))
        self.on_sample()
        if len(self.late) == self.count:
            self.done.set()


@contextlib.asynccontextmanager
async def _consumed(
    queue: Queue, name: str, handler: Callable[[Job, Any], Awaitable[None]], samples: _Samples
) -> AsyncIterator[None]:
    """A consumer of ``name`` running ``handler`` while the body enqueues, kept until every
    sample is in, then stopped."""
    consumer = await queue.consume(name, handler)
    try:
        yield
        with anyio.fail_after(_WAIT):
            await samples.done.wait()
    finally:
        consumer.cancel()
        await consumer.wait_stopped()


async def delayed_lateness(queue: Queue, on_sample: Callable[[], None]) -> list[float]:
    """Lateness of :data:`DELAYED_JOBS` delayed jobs enqueued one by one to an idle consumer."""
    samples = _Samples(DELAYED_JOBS, on_sample)

    async def record(job: Job, ctx: Any) -> None:
        samples.add(job)

    async with _consumed(queue, "bench-late-delayed", record, samples):
        await anyio.sleep(0.05)  # idle, waiting for work
        for n, delay in enumerate(delayed_delays()):
            await queue.enqueue("bench-late-delayed", {"n": n}, delay=delay)
    return samples.late


@contextlib.contextmanager
def _failures_unlogged() -> Iterator[None]:
    """The bench's own first attempts fail on purpose: no warning for each of them."""
    logger = logging.getLogger("blamequeue")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)


async def retry_lateness(queue: Queue, on_sample: Callable[[], None]) -> list[float]:
    """Lateness of the retries of :data:`RETRIED_JOBS` jobs that fail once, each retried after a
    fixed :data:`RETRY_BACKOFF`, enqueued 50 ms apart so that their retries do not coincide."""
    samples = _Samples(RETRIED_JOBS, on_sample)

    async def flaky(job: Job, ctx: Any) -> None:
        if job.attempts == 1:
            raise RuntimeError("the first attempt fails (bench)")
        samples.add(job)

    with _failures_unlogged():
        async with _consumed(queue, "bench-late-retry", flaky, samples):
            for n in range(RETRIED_JOBS):
                await queue.enqueue(
                    "bench-late-retry", {"n": n}, max_attempts=2, backoff=[RETRY_BACKOFF]
                )
                await anyio.sleep(0.05)
    return samples.late


async def delayed_lateness_elsewhere(queue: Queue, on_sample: Callable[[], None]) -> list[float]:
    """Lateness of :data:`DELAYED_JOBS` delayed jobs enqueued here to :data:`LATE_QUEUE`, whose
    consumer, in a worker process of its own, answers each job with its lateness."""
    ids = [
        await queue.enqueue(LATE_QUEUE, {"n": n}, delay=delay)
        for n, delay in enumerate(delayed_delays())
    ]
    late: list[float] = []
    for job_id in ids:
        late.append(float(await queue.result(job_id, timeout=_WAIT)))
        on_sample()
    return late
