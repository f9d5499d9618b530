"""Running jobs in a test: a handler that records what it ran, and consumers that are stopped,
and waited for, under the safety net."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from blamequeue import Consumer, Job, JobContext, Queue

from .fixtures import SAFETY_NET, Conformance

__all__ = ["Recorder", "consuming", "lease_order", "stop"]


class Recorder:
    """A handler that completes every job and remembers what it ran, in order."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        """The payloads."""
        self.jobs: list[Job] = []

    async def __call__(self, job: Job, ctx: JobContext) -> None:
        self.seen.append(job.payload)
        self.jobs.append(job)


async def lease_order(conformance: Conformance, *, max: int = 100, **options: Any) -> list[Any]:
    """Run one tick of the test's queue (``options`` as for ``Queue.tick``), completing each job;
    the payloads it ran, in the order it ran them (its lease order)."""
    record = Recorder()
    await conformance.queue.tick(conformance.name, record, max=max, **options)
    return record.seen


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
