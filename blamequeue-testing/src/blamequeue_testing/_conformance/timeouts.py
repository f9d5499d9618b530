"""SPEC §11: ``enqueue(..., timeout=seconds)`` really stops a handler.

The limit is measured on the queue's clock, so a ten-minute timeout is shown here by advancing
the virtual clock, never by waiting.  The attempt fails with a last error starting
``"timeout:"``: retried with backoff while attempts remain, else dead-lettered.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from blamequeue import Job, QueueError, TickResult

from .fixtures import Conformance, succeed, wait_for, wait_until
from .refusals import refused
from .running import Hanging, stop

__all__ = ["TestTimeouts"]

_TEN_MINUTES = 600.0
# Longer than the timeout, so the lease never runs out first (on a store with native leases
# too: virtual minutes are real milliseconds).
_LEASE = 900.0


async def _slow_job(conformance: Conformance, *, max_attempts: int) -> str:
    """Enqueue a job with a ten-minute timeout and ``max_attempts`` on the test's queue; its id."""
    return await conformance.queue.enqueue(
        conformance.name, "slow", timeout=_TEN_MINUTES, max_attempts=max_attempts
    )


async def _tick_past_timeout(
    conformance: Conformance,
    handler: Any,
    started: Callable[[], bool],
    seconds: float,
    **tick_options: Any,
) -> TickResult:
    """Run one tick in the background; move the clock ``seconds`` once ``started()``."""
    results: list[TickResult] = []

    async def tick() -> None:
        results.append(
            await conformance.queue.tick(conformance.name, handler, lease=_LEASE, **tick_options)
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await wait_until(started, "the handler to start")
        conformance.advance(seconds)
    [result] = results
    return result


@pytest.mark.anyio
class TestTimeouts:
    async def test_timeout_cancels_handler_and_dead_letters_the_last_attempt(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the timed-out job is read back from the dead-letter queue")
        q, name = conformance.queue, conformance.name
        job_id = await _slow_job(conformance, max_attempts=1)
        handler = Hanging()
        result = await _tick_past_timeout(
            conformance, handler, handler.started.is_set, _TEN_MINUTES
        )
        assert handler.cancelled
        assert (result.failed, result.moved_to_dlq, result.succeeded) == (1, 1, 0)
        [dead] = await q.dlq_list(name)
        assert dead.job_id == job_id
        assert dead.last_error is not None
        assert dead.last_error.startswith("timeout:")
        assert "600 s" in dead.last_error

    async def test_timeout_with_attempts_left_is_retried_with_backoff(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await _slow_job(conformance, max_attempts=3)
        handler = Hanging()
        result = await _tick_past_timeout(
            conformance, handler, handler.started.is_set, _TEN_MINUTES
        )
        assert (result.failed, result.moved_to_dlq) == (1, 0)
        assert await conformance.size() == 1
        if conformance.capabilities.inspection:
            [info] = (await q.list_jobs(name)).jobs
            assert info.state == "pending"
            assert info.job.last_error is not None
            assert "timeout" in info.job.last_error
        conformance.require_virtual_time("the retry waits out its backoff on the virtual clock")
        assert await conformance.leasable() == 0  # backoff first
        conformance.advance(1.0)
        assert await conformance.leasable() == 1

    async def test_handler_finishing_within_its_timeout_succeeds(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "quick", timeout=_TEN_MINUTES)
        result = await q.tick(name, succeed, lease=_LEASE)
        assert (result.succeeded, result.failed) == (1, 0)

    async def test_timeout_is_measured_on_the_queue_clock(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await _slow_job(conformance, max_attempts=1)
        handler = Hanging()
        results: list[TickResult] = []

        async def tick() -> None:
            results.append(await q.tick(name, handler, lease=_LEASE))

        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            await wait_for(handler.started, "the handler to start")
            conformance.advance(_TEN_MINUTES - 1)
            for _ in range(50):
                await anyio.lowlevel.checkpoint()
            assert not handler.cancelled
            assert not results
            conformance.advance(1)
        assert handler.cancelled
        assert results[0].failed == 1

    async def test_consumer_enforces_timeout(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await _slow_job(conformance, max_attempts=1)
        handler = Hanging()
        consumer = await q.consume(name, handler, lease=_LEASE, poll_interval=0.05)
        await wait_for(handler.started, "the handler to start")
        conformance.advance(_TEN_MINUTES)
        await wait_until(lambda: consumer.stats.failed == 1, "the timed-out attempt to settle")
        assert handler.cancelled
        assert consumer.stats.moved_to_dlq == 1
        await stop(consumer)
        assert await conformance.size() == 0

    async def test_sync_handler_past_its_timeout_is_abandoned(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the timed-out job is read back from the dead-letter queue")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "blocking", timeout=_TEN_MINUTES, max_attempts=1)
        started, release, returned = threading.Event(), threading.Event(), threading.Event()

        def blocking(job: Job, ctx: Any) -> None:
            started.set()
            release.wait(30)
            returned.set()

        try:
            result = await _tick_past_timeout(conformance, blocking, started.is_set, _TEN_MINUTES)
        finally:
            release.set()
        # The thread could not be stopped; the attempt failed without it and whatever it
        # returns now is dropped.
        assert (result.failed, result.moved_to_dlq, result.succeeded) == (1, 1, 0)
        await anyio.to_thread.run_sync(returned.wait, 10)
        [dead] = await q.dlq_list(name)
        assert dead.last_error is not None
        assert dead.last_error.startswith("timeout:")
        assert await conformance.size() == 0

    @pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "30", True])
    async def test_bad_timeout_is_refused_before_anything_is_stored(
        self, conformance: Conformance, bad: Any
    ) -> None:
        q, name = conformance.queue, conformance.name
        caught = await refused("queue/bad-argument", q.enqueue(name, "x", timeout=bad))
        assert "timeout" in caught.message
        with pytest.raises(QueueError) as caught_many:
            await q.enqueue_many(name, ["x", "y"], timeout=bad)
        assert caught_many.value.code == "queue/bad-argument"
        assert await conformance.size() == 0
        await refused("queue/bad-argument", q.enqueue_many(name, ["x", "y"], timeout=bad))
        assert await conformance.size() == 0

    async def test_enqueue_many_carries_the_timeout_to_every_job(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a", "b"], timeout=_TEN_MINUTES, max_attempts=3)
        handler = Hanging()
        result = await _tick_past_timeout(
            conformance,
            handler,
            lambda: len(handler.job_ids) == 2,
            _TEN_MINUTES,
            max=2,
            concurrency=2,
        )
        assert (result.leased, result.failed) == (2, 2)
