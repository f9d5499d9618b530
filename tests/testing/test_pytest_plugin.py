"""The bq_* fixtures: a started memory-backed Queue on a virtual clock, without imports."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from blamequeue import Job, Queue
from blamequeue_testing import QueueFake, VirtualClock

pytestmark = pytest.mark.anyio


async def noop(job: Job, ctx: Any) -> None:
    return None


async def test_bq_queue_is_started_on_the_memory_backend(bq_queue: Queue) -> None:
    [status] = bq_queue.list_backends()
    assert (status.name, status.protocol) == ("memory", "memory")
    await bq_queue.enqueue("q", {"n": 1})
    assert await bq_queue.size("q") == 1


async def test_bq_queue_follows_bq_clock(bq_queue: Queue, bq_clock: VirtualClock) -> None:
    assert bq_queue.clock is bq_clock
    await bq_queue.enqueue("q", {"n": 1}, delay=10)
    assert (await bq_queue.tick("q", noop)).leased == 0
    bq_clock.advance(10)
    result = await bq_queue.tick("q", noop)
    assert (result.leased, result.succeeded, result.queue_depth) == (1, 1, 0)


async def test_backoff_waits_for_virtual_time(bq_queue: Queue, bq_clock: VirtualClock) -> None:
    async def failing(job: Job, ctx: Any) -> None:
        raise RuntimeError("down")

    await bq_queue.enqueue("q", {}, max_attempts=2)
    assert (await bq_queue.tick("q", failing)).failed == 1
    assert (await bq_queue.tick("q", failing)).leased == 0  # backoff: 1 s after attempt 1
    bq_clock.advance(1)
    result = await bq_queue.tick("q", failing)
    assert (result.failed, result.moved_to_dlq) == (1, 1)
    [dead] = await bq_queue.dlq_list("q")
    assert "down" in (dead.last_error or "")


async def test_an_expired_lease_is_swept_back_and_the_late_result_is_stale(
    bq_queue: Queue, bq_clock: VirtualClock
) -> None:
    attempts: list[int] = []

    async def slow(job: Job, ctx: Any) -> None:
        attempts.append(job.attempts)
        if job.attempts == 1:
            bq_clock.advance(30)  # the handler outlives its lease...
            assert await bq_queue.sweep() == 1  # ...and a sweep gives the job back

    await bq_queue.enqueue("q", {})
    first = await bq_queue.tick("q", slow, lease=30)
    assert (first.leased, first.stale, first.succeeded) == (1, 1, 0)
    second = await bq_queue.tick("q", slow, lease=30)
    assert (second.leased, second.succeeded) == (1, 1)
    assert attempts == [1, 2]


async def test_a_consumer_picks_up_a_delayed_job_when_the_clock_advances(
    bq_queue: Queue, bq_clock: VirtualClock
) -> None:
    done = anyio.Event()

    async def handler(job: Job, ctx: Any) -> None:
        done.set()

    await bq_queue.enqueue("q", {}, delay=60)
    consumer = await bq_queue.consume("q", handler, poll_interval=5)
    await anyio.wait_all_tasks_blocked()
    assert not done.is_set()
    await bq_clock.advance_and_settle(60)
    with anyio.fail_after(5):  # real-time guard against a hang, not a timing assertion
        await done.wait()
    consumer.cancel()


async def test_bq_fake_is_bound_to_bq_queue(bq_queue: Queue, bq_fake: QueueFake) -> None:
    assert bq_fake.queue is bq_queue
    assert bq_fake.clock is bq_queue.clock
    await bq_queue.enqueue("q", 1)
    bq_fake.assert_dispatched("q", 1)
