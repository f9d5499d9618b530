"""Running jobs in a test: a handler that records what it ran, and consumers that are stopped,
and waited for, under the safety net."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel

from blamequeue import Consumer, Job, JobContext, Queue, RateLimit

from .fixtures import SAFETY_NET, Conformance, fail, succeed, wait_for, wait_until

__all__ = [
    "Hanging",
    "Recorder",
    "consuming",
    "dead_job",
    "done_job",
    "lease_order",
    "starts_two_at_a_time",
    "stop",
]


class Recorder:
    """A handler that completes every job and remembers what it ran, in order."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        """The payloads."""
        self.jobs: list[Job] = []

    async def __call__(self, job: Job, ctx: JobContext) -> None:
        self.seen.append(job.payload)
        self.jobs.append(job)


class Crowd:
    """A handler whose runs each wait until ``size`` of them run at once, then complete;
    :attr:`peak` is the most that ever ran at once.  ``on_start`` (settable later) is called
    as each run starts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.running = 0
        self.peak = 0
        self.full = anyio.Event()
        self.on_start: Callable[[], object] | None = None

    async def __call__(self, job: Job, ctx: JobContext) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        if self.on_start is not None:
            self.on_start()
        if self.running == self.size:
            self.full.set()
        await wait_for(self.full, f"{self.size} handlers to run at once")
        await anyio.lowlevel.checkpoint()
        self.running -= 1


class Hanging:
    """A handler that runs until :attr:`release` is set (or it is cancelled) and records how
    each run ended."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        """Set when the first run starts."""
        self.release = anyio.Event()
        self.job_ids: list[str] = []
        """The jobs it started, in order."""
        self.finished: list[Any] = []
        """The payloads of the runs that returned once released."""
        self.cancelled = False

    async def __call__(self, job: Job, ctx: JobContext) -> None:
        self.job_ids.append(job.id)
        self.started.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        self.finished.append(job.payload)


async def lease_order(conformance: Conformance, *, max: int = 100, **options: Any) -> list[Any]:
    """Run one tick of the test's queue (``options`` as for ``Queue.tick``), completing each job;
    the payloads it ran, in the order it ran them (its lease order)."""
    record = Recorder()
    await conformance.queue.tick(conformance.name, record, max=max, **options)
    return record.seen


async def done_job(queue: Queue, name: str, payload: Any = "done", **options: Any) -> str:
    """Enqueue ``payload`` on ``name`` (``options`` as for ``Queue.enqueue``) and complete it in
    a tick of its own; its id."""
    job_id = await queue.enqueue(name, payload, **options)
    result = await queue.tick(name, succeed)
    assert (result.leased, result.succeeded) == (1, 1), result
    return job_id


async def dead_job(queue: Queue, name: str, payload: Any = "dead", **options: Any) -> str:
    """Enqueue ``payload`` on ``name`` with a single attempt (``options`` as for
    ``Queue.enqueue``) and fail it in a tick of its own, so that it ends dead (in the
    dead-letter queue, on a backend that keeps one); its id."""
    job_id = await queue.enqueue(name, payload, max_attempts=1, **options)
    result = await queue.tick(name, fail)
    assert (result.leased, result.failed, result.moved_to_dlq) == (1, 1, 1), result
    return job_id


async def stop(*consumers: Consumer) -> None:
    """Cancel each consumer, then wait until every one has stopped (its handlers settled)."""
    for consumer in consumers:
        consumer.cancel()
    with anyio.fail_after(SAFETY_NET):
        for consumer in consumers:
            await consumer.wait_stopped()


@asynccontextmanager
async def consuming(
    queue: Queue, name: str, handler: Any, **options: Any
) -> AsyncIterator[Consumer]:
    """A consumer of ``name`` running ``handler`` (``options`` as for ``Queue.consume``),
    stopped on exit, whatever the test body raised."""
    consumer = await queue.consume(name, handler, **options)
    try:
        yield consumer
    finally:
        await stop(consumer)


async def starts_two_at_a_time(
    conformance: Conformance, option: str, *, advances: Sequence[float]
) -> list[float]:
    """Consume five jobs of the test's queue at concurrency 5 with the ``Queue.consume`` rate
    option ``option`` (``rate_limit`` or ``global_rate_limit``) set to two starts per 10 s
    window; once the first two have run, move the clock by each of ``advances`` in turn,
    waiting each time for up to two more.  When each handler started, in seconds on the
    queue's clock after the consumer was started."""
    await conformance.queue.enqueue_many(conformance.name, list(range(5)))
    started_at = conformance.now()
    starts: list[float] = []

    async def record(job: Job, ctx: JobContext) -> None:
        starts.append(conformance.now() - started_at)

    rate = {option: RateLimit(max=2, per_seconds=10)}
    async with consuming(
        conformance.queue, conformance.name, record, concurrency=5, poll_interval=0.05, **rate
    ) as consumer:
        started = 2
        await wait_until(_succeeded(consumer, started), "the first two starts")
        for seconds in advances:
            conformance.advance(seconds)
            started = min(started + 2, 5)
            await wait_until(_succeeded(consumer, started), f"{started} starts, {seconds} s on")
    return starts


def _succeeded(consumer: Consumer, count: int) -> Callable[[], bool]:
    return lambda: consumer.stats.succeeded == count
