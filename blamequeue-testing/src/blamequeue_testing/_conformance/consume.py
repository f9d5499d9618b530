"""SPEC §2 ``consume`` and §3.9: the resident consumer, its concurrency, cancel and rate limit.

A consumer idles with ``poll_interval`` on the queue's clock (and wakes at once for an enqueue
in this process); the tests advance the virtual clock to wake it and wait for handler effects
with events, under a safety net.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from blamequeue import Job, JobContext

from .fixtures import Conformance, succeed, wait_for, wait_until
from .refusals import refused_at_once
from .running import Crowd, Hanging, starts_two_at_a_time, stop

__all__ = ["TestConsume", "TestConsumerConcurrency", "TestRateLimit"]

POLL = 0.05


@pytest.mark.anyio
class TestConsume:
    async def test_consumer_runs_jobs_to_done(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2, 3])
        seen: list[Any] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.payload)

        consumer = await q.consume(name, record, poll_interval=POLL)
        await wait_until(lambda: consumer.stats.succeeded == 3, "three jobs to complete")
        await stop(consumer)
        assert seen == [1, 2, 3]
        assert (consumer.stats.leased, consumer.stats.failed) == (3, 0)
        assert await conformance.size() == 0

    async def test_idle_consumer_wakes_for_a_job_enqueued_in_this_process(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        handled = anyio.Event()

        async def record(job: Job, ctx: JobContext) -> None:
            handled.set()

        # A poll interval far beyond the safety net: only the enqueue's wake-up can deliver.
        consumer = await q.consume(name, record, poll_interval=3600)
        await q.enqueue(name, "wake up")
        await wait_for(handled, "the idle consumer to take the new job")
        await stop(consumer)

    async def test_idle_consumer_wakes_when_the_clock_reaches_a_delayed_job(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "delays cannot be checked")
        conformance.require_virtual_time("the delay is waited out by moving the clock")
        q, name, clock = conformance.queue, conformance.name, conformance.clock
        due = conformance.now() + 60.0
        await q.enqueue(name, "later", delay=60)
        started_at: list[float] = []
        handled = anyio.Event()

        async def record(job: Job, ctx: JobContext) -> None:
            started_at.append(conformance.now())
            handled.set()

        consumer = await q.consume(name, record, poll_interval=5, heartbeat=False)
        # Its only sleep on the clock is the idle poll: once it sleeps, it is idle.
        await wait_until(lambda: clock.next_deadline is not None, "the consumer to idle")
        conformance.advance(60)
        await wait_for(handled, "the consumer to take the job once due")
        await stop(consumer)
        assert started_at == [due]

    async def test_consumer_retries_a_failed_job_after_its_backoff(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "retry delays cannot be checked")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "flaky", max_attempts=3)
        runs: list[tuple[int, float]] = []

        async def flaky(job: Job, ctx: JobContext) -> None:
            runs.append((job.attempts, conformance.now()))
            if job.attempts == 1:
                raise RuntimeError("first attempt fails")

        consumer = await q.consume(name, flaky, poll_interval=POLL)
        await wait_until(lambda: consumer.stats.failed == 1, "the first attempt to fail")
        failed_at = runs[0][1]
        conformance.advance(1)  # the default backoff after one failure
        await wait_until(lambda: consumer.stats.succeeded == 1, "the retry to succeed")
        await stop(consumer)
        assert runs == [(1, failed_at), (2, failed_at + 1)]
        assert await conformance.size() == 0

    async def test_consumer_survives_failing_handlers_and_counts_them(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "die", max_attempts=1)
        await q.enqueue(name, "retry", max_attempts=5)
        await q.enqueue(name, "ok")

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload != "ok":
                raise RuntimeError(job.payload)

        consumer = await q.consume(name, handler, poll_interval=POLL)
        await wait_until(lambda: consumer.stats.succeeded == 1, "the good job to complete")
        await wait_until(lambda: consumer.stats.failed == 2, "both failures to settle")
        assert not consumer.cancelled  # it lives on
        await q.enqueue(name, "ok")
        await wait_until(lambda: consumer.stats.succeeded == 2, "a later job to complete")
        await stop(consumer)
        stats = consumer.stats
        assert (stats.leased, stats.succeeded, stats.failed, stats.stale) == (4, 2, 2, 0)
        if conformance.capabilities.dlq:
            assert stats.moved_to_dlq == 1
            assert await conformance.dlq_size() == 1
        assert await conformance.size() == 1  # the retry waits for its backoff

    async def test_consumer_cancel_stops_leasing_at_once_and_settles_running_handlers(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["first", "second", "third"])
        slow = Hanging()
        consumer = await q.consume(name, slow, poll_interval=POLL)
        await wait_for(slow.started, "the first job to start")
        assert consumer.in_flight == 1
        consumer.cancel()
        assert consumer.cancelled
        await q.enqueue(name, "fourth")
        slow.release.set()
        with anyio.fail_after(10):
            await consumer.wait_stopped()
        assert slow.finished == ["first"]  # the running handler finished on its own ...
        assert (consumer.stats.leased, consumer.stats.succeeded) == (1, 1)  # ... and settled
        assert consumer.in_flight == 0
        assert await conformance.size() == 3  # nothing else was leased
        assert await conformance.leasable() == 3


@pytest.mark.anyio
class TestConsumerConcurrency:
    async def test_consumer_never_runs_more_than_concurrency_handlers(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(10)))
        crowd = Crowd(3)
        consumer = await q.consume(name, crowd, concurrency=3, poll_interval=POLL)
        in_flight: list[int] = []
        crowd.on_start = lambda: in_flight.append(consumer.in_flight)
        await wait_until(lambda: consumer.stats.succeeded == 10, "ten jobs to complete")
        await stop(consumer)
        assert crowd.peak == 3
        assert max(in_flight) <= 3

    async def test_concurrency_can_be_raised_and_lowered_while_the_consumer_runs(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(8)))
        first_three = anyio.Event()
        running = [0]
        in_flight: list[int] = []  # handlers running as each one starts, itself included

        async def handler(job: Job, ctx: JobContext) -> None:
            running[0] += 1
            in_flight.append(running[0])
            try:
                if len(in_flight) <= 3:
                    await first_three.wait()
                else:
                    for _ in range(3):  # room for another handler to start beside this one
                        await anyio.lowlevel.checkpoint()
            finally:
                running[0] -= 1

        consumer = await q.consume(name, handler, concurrency=1, poll_interval=POLL)
        await wait_until(lambda: running[0] == 1, "the one slot to fill")
        consumer.concurrency = 3
        await wait_until(lambda: running[0] == 3, "the two new slots to fill")
        assert (consumer.concurrency, consumer.stats.leased) == (3, 3)
        consumer.concurrency = 1
        first_three.set()
        await wait_until(lambda: consumer.stats.succeeded == 8, "every job to complete")
        await stop(consumer)
        assert in_flight[3:] == [1] * 5  # one at a time once lowered
        refused_at_once("queue/bad-argument", lambda: setattr(consumer, "concurrency", 0))
        assert consumer.concurrency == 1

    async def test_consumers_share_a_backlog_without_prefetching(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(6)))
        release = anyio.Event()
        started: dict[str, int] = {"a": 0, "b": 0}

        def blocking(label: str) -> Any:
            async def handler(job: Job, ctx: JobContext) -> None:
                started[label] += 1
                await release.wait()

            return handler

        a = await q.consume(name, blocking("a"), concurrency=2, poll_interval=POLL)
        await wait_until(lambda: started["a"] == 2, "consumer a to fill its two slots")
        b = await q.consume(name, blocking("b"), concurrency=1, poll_interval=POLL)
        await wait_until(lambda: started["b"] == 1, "consumer b to fill its slot")
        # Three leases held in all: the other three jobs are still there for anyone.
        assert (a.stats.leased, b.stats.leased) == (2, 1)
        assert await conformance.leasable() == 3
        release.set()
        await wait_until(
            lambda: a.stats.succeeded == 2 and b.stats.succeeded == 1, "the held jobs to settle"
        )
        await stop(a, b)
        assert started == {"a": 2, "b": 1}
        assert await conformance.size() == 0


@pytest.mark.anyio
class TestRateLimit:
    async def test_rate_limit_caps_handler_starts_per_window(
        self, conformance: Conformance
    ) -> None:
        starts = await starts_two_at_a_time(conformance, "rate_limit", advances=[10, 10])
        # Time moves only when the test advances it: a third start before the window passed
        # would carry the first window's time.
        assert starts == [0, 0, 10, 10, 20]

    async def test_rate_limit_accepts_a_mapping(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2])
        consumer = await q.consume(
            name, succeed, poll_interval=POLL, rate_limit={"max": 1, "per_seconds": 5}
        )
        await wait_until(lambda: consumer.stats.succeeded == 1, "the first start")
        conformance.advance(5)
        await wait_until(lambda: consumer.stats.succeeded == 2, "the second start")
        await stop(consumer)
