"""SPEC §2 ``tick`` and §3.7: one serverless-style drain and what it reports."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from blamequeue import Job, JobContext, TickResult

from .fixtures import Conformance, succeed, wait_for
from .running import Crowd

__all__ = ["TestTick"]


def _settled_once(result: TickResult) -> bool:
    return result.leased == result.succeeded + result.failed + result.stale + result.unsettled


@pytest.mark.anyio
class TestTick:
    async def test_tick_on_empty_queue_reports_nothing(self, conformance: Conformance) -> None:
        result = await conformance.queue.tick(conformance.name, succeed)
        assert result == TickResult(
            leased=0,
            succeeded=0,
            failed=0,
            stale=0,
            unsettled=0,
            moved_to_dlq=0,
            may_have_more=False,
            queue_depth=0,
        )

    async def test_tick_counts_successes_failures_and_dead_letters(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "ok")
        await q.enqueue(name, "retry", max_attempts=3)
        await q.enqueue(name, "die", max_attempts=1)
        await q.enqueue(name, "ok")
        await q.enqueue(name, "later", delay=3600)

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload != "ok":
                raise RuntimeError(job.payload)

        result = await q.tick(name, handler, max=10)
        assert result.leased == 4
        assert result.succeeded == 2
        assert result.failed == 2  # dead-lettered failures included
        if conformance.capabilities.dlq:
            assert result.moved_to_dlq == 1
        assert (result.stale, result.unsettled) == (0, 0)
        assert result.may_have_more is False
        assert _settled_once(result)

    async def test_tick_queue_depth_is_size_after_the_batch(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["ok", "retry", "ok", "ok"])
        await q.enqueue(name, "later", delay=3600)

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload == "retry":
                raise RuntimeError("again later")

        result = await q.tick(name, handler, max=3)
        assert result.queue_depth == await q.size(name) == 3  # retry + one not leased + delayed

    async def test_tick_reports_may_have_more_when_the_batch_is_full(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(5)))
        first = await q.tick(name, succeed, max=2)
        assert (first.leased, first.may_have_more, first.queue_depth) == (2, True, 3)
        second = await q.tick(name, succeed, max=3)  # exactly full: there may be more
        assert (second.leased, second.may_have_more, second.queue_depth) == (3, True, 0)
        third = await q.tick(name, succeed, max=3)
        assert (third.leased, third.may_have_more, third.queue_depth) == (0, False, 0)

    async def test_tick_leases_at_most_max_jobs(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(7)))
        result = await q.tick(name, succeed, max=4)
        assert result.leased == 4
        assert result.succeeded == 4
        assert await conformance.size() == 3

    async def test_tick_counts_each_leased_job_exactly_once(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        outcomes = ["ok", "fail", "ok", "die", "fail", "ok", "die", "ok"]
        for outcome in outcomes:
            await q.enqueue(name, outcome, max_attempts=1 if outcome == "die" else 3)
        calls: list[str] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            calls.append(job.id)
            if job.payload != "ok":
                raise RuntimeError(job.payload)

        for concurrency in (1, 3):
            result = await q.tick(name, handler, max=4, concurrency=concurrency)
            assert result.leased == 4
            assert _settled_once(result), result
        assert len(calls) == len(set(calls)) == len(outcomes)  # no job ran twice

    async def test_tick_counts_lost_leases_as_stale(self, conformance: Conformance) -> None:
        conformance.require_virtual_leases()
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a", "b"])

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload == "a":
                conformance.advance(31)
                await q.sweep()

        result = await q.tick(name, handler, max=2, lease=30)
        assert (result.leased, result.stale, result.succeeded) == (2, 2, 0)
        assert _settled_once(result)
        assert result.queue_depth == 2

    async def test_tick_with_concurrency_one_runs_jobs_in_lease_order(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        priorities = [0, 3, 1, 2] if conformance.capabilities.priority else [0, 0, 0, 0]
        for n, priority in enumerate(priorities):
            await q.enqueue(name, n, priority=priority)
        trace: list[tuple[str, Any]] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            trace.append(("start", job.payload))
            for _ in range(3):  # chances for another handler to start, were one allowed to
                await anyio.lowlevel.checkpoint()
            trace.append(("end", job.payload))

        await q.tick(name, handler, max=10, concurrency=1)
        order = sorted(range(4), key=lambda n: (-priorities[n], n))
        assert trace == [step for n in order for step in (("start", n), ("end", n))]

    async def test_tick_with_concurrency_runs_handlers_at_once(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(5)))
        crowd = Crowd(2)
        result = await q.tick(name, crowd, max=5, concurrency=2)
        assert result.succeeded == 5
        assert crowd.peak == 2

    async def test_tick_leaves_nothing_running(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2, 3])
        finished: list[int] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            await anyio.lowlevel.checkpoint()
            finished.append(job.payload)

        result = await q.tick(name, handler, max=3, concurrency=3)
        assert sorted(finished) == [1, 2, 3]  # all done when tick returns
        assert result.succeeded == 3
        assert await conformance.size() == 0

    @pytest.mark.parametrize("concurrency", [1, 2])
    async def test_cancelled_tick_hands_back_every_job_it_leased(
        self, conformance: Conformance, concurrency: int
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a", "b", "c"], max_attempts=1)
        started = anyio.Event()

        async def stuck(job: Job, ctx: JobContext) -> None:
            started.set()
            await anyio.sleep_forever()

        async def run_tick() -> None:
            await q.tick(name, stuck, max=3, concurrency=concurrency)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_tick)
            await wait_for(started, "a handler to start")
            tg.cancel_scope.cancel()  # the caller gives up (a serverless deadline, say)
        # Every leased job, started or not, is pending again at once with its attempt given
        # back: none waits out its lease, none is dead-lettered without having run.
        assert await conformance.size() == 3
        attempts: list[int] = []

        async def record(job: Job, ctx: JobContext) -> None:
            attempts.append(job.attempts)

        result = await q.tick(name, record, max=10)  # no clock advance
        assert result.leased == 3
        assert attempts == [1, 1, 1]
