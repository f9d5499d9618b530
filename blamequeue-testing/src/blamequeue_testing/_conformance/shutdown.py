"""SPEC §2 ``shutdown`` and §3.8: waiting for handlers, and releasing those past the deadline.

A worker queue is started inside the test (``start`` and ``shutdown`` from the same task, as
anyio requires); what it left behind is read through a second queue on the same store.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.from_thread
import pytest

from blamequeue import Job, JobContext, Queue

from .fixtures import SAFETY_NET, Conformance, wait_for, wait_until
from .running import Hanging, Recorder

__all__ = ["TestShutdown"]

POLL = 0.05


@asynccontextmanager
async def _worker_and_observer(conformance: Conformance) -> AsyncIterator[tuple[Queue, Queue]]:
    """A started worker queue and an observer queue that shares its store (the test skips when
    they do not); on exit the worker is shut down, unless the test did, then the observer."""
    async with conformance.factory.open() as observer:
        worker = conformance.factory.build()
        await worker.start()
        try:
            await conformance.require_shared_store(worker, observer)
            yield worker, observer
        finally:
            await worker.shutdown()


async def _released_with_its_attempt_given_back(conformance: Conformance, observer: Queue) -> None:
    """The one job the worker was running is pending again at once (no clock advance), not
    dead-lettered, and its next run is its first attempt again."""
    name = conformance.name
    assert await observer.size(name) == 1
    if conformance.capabilities.dlq:
        assert await observer.dlq_size(name) == 0
    record = Recorder()
    rerun = await observer.tick(name, record)
    assert (rerun.leased, rerun.succeeded) == (1, 1)
    assert [job.attempts for job in record.jobs] == [1]


@pytest.mark.anyio
class TestShutdown:
    async def test_shutdown_waits_for_running_handlers(self, conformance: Conformance) -> None:
        name = conformance.name
        slow = Hanging()

        async with anyio.create_task_group() as tg:  # entered before the worker's own
            worker = conformance.factory.build()
            await worker.start()
            try:
                await worker.enqueue(name, "finish me")
                consumer = await worker.consume(name, slow, poll_interval=POLL)
                await wait_for(slow.started, "the handler to start")

                async def release_once_shutting_down() -> None:
                    await wait_until(lambda: consumer.cancelled, "shutdown to stop the consumer")
                    slow.release.set()

                tg.start_soon(release_once_shutting_down)
                await worker.shutdown(timeout=SAFETY_NET)
            finally:
                await worker.shutdown()
        assert slow.finished == ["finish me"]
        stats = consumer.stats
        assert (stats.succeeded, stats.failed, stats.stale, stats.unsettled) == (1, 0, 0, 0)

    async def test_shutdown_past_its_deadline_cancels_handlers_and_releases_their_jobs(
        self, conformance: Conformance
    ) -> None:
        name = conformance.name
        started = anyio.Event()
        cancelled: list[int] = []

        async def stuck(job: Job, ctx: JobContext) -> None:
            started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.append(job.attempts)
                raise

        async with _worker_and_observer(conformance) as (worker, observer):
            # One attempt only: were the interruption counted as a failure, it would die.
            await worker.enqueue(name, "interrupted", max_attempts=1)
            consumer = await worker.consume(name, stuck, poll_interval=POLL)
            await wait_for(started, "the handler to start")
            await worker.shutdown(timeout=0)
            assert cancelled == [1]
            stats = consumer.stats
            assert (stats.succeeded, stats.failed, stats.moved_to_dlq) == (0, 0, 0)
            await _released_with_its_attempt_given_back(conformance, observer)

    async def test_shutdown_abandons_a_sync_handler_past_its_deadline(
        self, conformance: Conformance
    ) -> None:
        name = conformance.name
        started = anyio.Event()
        unblock = threading.Event()
        finished: list[str] = []

        def stuck(job: Job, ctx: Any) -> None:
            anyio.from_thread.run_sync(started.set)
            unblock.wait(SAFETY_NET)
            finished.append(job.id)

        async with _worker_and_observer(conformance) as (worker, observer):
            try:
                await worker.enqueue(name, "in a thread", max_attempts=1)
                consumer = await worker.consume(name, stuck, poll_interval=POLL)
                await wait_for(started, "the sync handler to start")
                await worker.shutdown(timeout=0)  # a thread cannot be cancelled: abandoned
            finally:
                unblock.set()
            assert (consumer.stats.succeeded, consumer.stats.failed) == (0, 0)
            await wait_until(lambda: len(finished) == 1, "the abandoned thread to end")
            # Its late completion was not applied.
            await _released_with_its_attempt_given_back(conformance, observer)

    async def test_shutdown_leaves_waiting_jobs_pending(self, conformance: Conformance) -> None:
        name = conformance.name
        started = anyio.Event()

        async def stuck(job: Job, ctx: JobContext) -> None:
            started.set()
            await anyio.sleep_forever()

        async with _worker_and_observer(conformance) as (worker, observer):
            await worker.enqueue_many(name, ["running", "waiting", "waiting"])
            await worker.consume(name, stuck, poll_interval=POLL)
            await wait_for(started, "the handler to start")
            await worker.shutdown(timeout=0)
            assert await observer.size(name) == 3
            assert (await observer.tick(name, _record_nothing, max=10)).leased == 3


async def _record_nothing(job: Job, ctx: JobContext) -> None:
    return None
