"""SPEC §3.4, §3.5 and §3.11: lease fencing, the sweep, heartbeats and extending a lease.

Lease expiry follows the virtual clock: a test moves time past a lease while a handler still
runs, sweeps, and lets another worker lease the job again.  Handlers only record what they see;
the test asserts afterwards (an assert failing inside a handler would just fail the attempt).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import anyio

from blamequeue import Job, JobContext, QueueError, TickResult

from .fixtures import BACKEND, Conformance, succeed, wait_for, wait_until
from .requirements import requires_virtual_leases
from .running import stop

__all__ = ["TestExtendLease", "TestHeartbeat", "TestLeaseFence", "TestSweep"]

LEASE = 10.0


async def _tick_one_job(
    conformance: Conformance, handler: Any, payload: object = "x", **options: Any
) -> TickResult:
    """Enqueue one job on the test's queue (``options`` as for ``Queue.enqueue``) and run it
    in a tick under a :data:`LEASE`-second lease; the tick's result."""
    await conformance.queue.enqueue(conformance.name, payload, **options)
    return await conformance.queue.tick(conformance.name, handler, lease=LEASE)


@requires_virtual_leases
class TestLeaseFence:
    async def test_handler_that_outlives_its_lease_ends_stale(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        runs: list[tuple[str, int]] = []
        seen: dict[str, Any] = {}

        async def again(job: Job, ctx: JobContext) -> None:
            runs.append(("second worker", job.attempts))

        async def slow(job: Job, ctx: JobContext) -> None:
            runs.append(("first worker", job.attempts))
            conformance.advance(LEASE + 1)  # this handler outlives its lease ...
            seen["swept"] = await q.sweep()  # ... the job is recovered ...
            seen["second"] = await q.tick(name, again, lease=LEASE)  # ... and run elsewhere

        result = await _tick_one_job(conformance, slow, "slow")
        assert seen["swept"] == 1
        assert seen["second"].succeeded == 1
        assert runs == [("first worker", 1), ("second worker", 2)]
        assert (result.leased, result.stale) == (1, 1)
        assert (result.succeeded, result.failed, result.unsettled) == (0, 0, 0)
        assert await conformance.size() == 0

    async def test_stale_completion_is_not_applied(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "contended")
        first_started, first_release = anyio.Event(), anyio.Event()
        second_started, second_release = anyio.Event(), anyio.Event()
        results: dict[str, TickResult] = {}

        async def first(job: Job, ctx: JobContext) -> None:
            first_started.set()
            await first_release.wait()

        async def second(job: Job, ctx: JobContext) -> None:
            second_started.set()
            await second_release.wait()

        async def run(label: str, handler: Any) -> None:
            results[label] = await q.tick(name, handler, lease=LEASE)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first", first)
            await wait_for(first_started, "the first worker to start")
            conformance.advance(LEASE + 1)
            assert await q.sweep() == 1
            tg.start_soon(run, "second", second)
            await wait_for(second_started, "the second worker to start")
            first_release.set()  # the first worker completes after losing its lease
            await wait_until(lambda: "first" in results, "the first tick to return")
            assert (results["first"].stale, results["first"].succeeded) == (1, 0)
            assert await conformance.size() == 1  # still inflight with the second worker
            assert await conformance.leasable() == 0
            second_release.set()
        assert (results["second"].succeeded, results["second"].stale) == (1, 0)
        assert await conformance.size() == 0

    async def test_stale_failure_is_not_applied(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "contended", max_attempts=2)
        second_started, second_release = anyio.Event(), anyio.Event()
        results: dict[str, TickResult] = {}

        async def second(job: Job, ctx: JobContext) -> None:
            second_started.set()
            await second_release.wait()

        async def run_second() -> None:
            results["second"] = await q.tick(name, second, lease=LEASE)

        async with anyio.create_task_group() as tg:

            async def first(job: Job, ctx: JobContext) -> None:
                conformance.advance(LEASE + 1)
                await q.sweep()
                tg.start_soon(run_second)
                await wait_for(second_started, "the second worker to start")
                raise RuntimeError("failed after losing the lease")

            results["first"] = await q.tick(name, first, lease=LEASE)
            assert (results["first"].stale, results["first"].failed) == (1, 0)
            assert results["first"].moved_to_dlq == 0
            assert await conformance.size() == 1  # not re-pended, not dead: the second holds it
            assert await conformance.leasable() == 0
            if conformance.capabilities.dlq:
                assert await conformance.dlq_size() == 0
            second_release.set()
        assert results["second"].succeeded == 1
        assert await conformance.size() == 0

    async def test_completion_is_applied_once(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "once")
        result = await q.tick(name, succeed)
        assert result.succeeded == 1
        conformance.advance(LEASE * 100)
        assert await q.sweep() == 0  # nothing inflight is left behind
        assert await conformance.leasable() == 0
        assert await conformance.size() == 0


@requires_virtual_leases
class TestSweep:
    async def test_sweep_repends_expired_lease_due_at_once(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        seen: dict[str, Any] = {}

        async def rerun(job: Job, ctx: JobContext) -> None:
            seen["attempts"] = job.attempts

        async def stuck(job: Job, ctx: JobContext) -> None:
            conformance.advance(LEASE + 1)
            seen["swept"] = await q.sweep()
            seen["size"] = await q.size(name)
            seen["rerun"] = await q.tick(name, rerun)  # no clock advance: due at once

        await _tick_one_job(conformance, stuck, max_attempts=3)
        assert seen["swept"] == 1
        assert seen["size"] == 1
        assert seen["rerun"].leased == 1
        assert seen["attempts"] == 2

    async def test_sweep_leaves_unexpired_lease_alone(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        seen: dict[str, Any] = {}

        async def slowish(job: Job, ctx: JobContext) -> None:
            conformance.advance(LEASE - 0.001)
            seen["swept"] = await q.sweep()
            seen["leasable"] = (await q.tick(name, succeed)).leased

        result = await _tick_one_job(conformance, slowish)
        assert seen == {"swept": 0, "leasable": 0}
        assert result.succeeded == 1

    async def test_lease_expires_at_its_deadline(self, conformance: Conformance) -> None:
        q = conformance.queue
        seen: dict[str, Any] = {}

        async def handler(job: Job, ctx: JobContext) -> None:
            conformance.advance_to(ctx.lease_expires_at.timestamp())
            seen["swept"] = await q.sweep()

        result = await _tick_one_job(conformance, handler)
        assert seen["swept"] == 1
        assert result.stale == 1

    async def test_sweep_dead_letters_expired_lease_with_exhausted_attempts(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the dead-lettered job cannot be looked at")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, {"poison": True}, max_attempts=1, trace_id="t-1")
        seen: dict[str, Any] = {}

        async def kills_its_worker(job: Job, ctx: JobContext) -> None:
            conformance.advance(LEASE + 1)
            seen["swept"] = await q.sweep()
            seen["swept_at"] = conformance.now()

        result = await q.tick(name, kills_its_worker, lease=LEASE)
        assert seen["swept"] == 1
        assert (result.stale, result.failed, result.moved_to_dlq) == (1, 0, 0)
        assert await conformance.size() == 0
        [letter] = await q.dlq_list(name)
        assert letter.job_id == job_id
        assert letter.payload == {"poison": True}
        assert letter.attempts == 1
        assert letter.trace_id == "t-1"
        assert letter.last_error is not None
        assert "lease expired" in letter.last_error
        assert letter.failed_at == datetime.fromtimestamp(seen["swept_at"], UTC)

    async def test_sweep_counts_every_expired_lease(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a", "b", "c"])
        seen: dict[str, Any] = {}

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload == "a":  # all three leases were taken together and expire together
                conformance.advance(LEASE + 1)
                seen["swept"] = await q.sweep(backend=BACKEND)

        result = await q.tick(name, handler, max=3, lease=LEASE)
        assert seen["swept"] == 3
        assert (result.leased, result.stale) == (3, 3)
        assert await conformance.size() == 3
        assert await conformance.leasable() == 3

    async def test_sweep_timer_recovers_expired_leases_on_the_queue_clock(
        self, conformance: Conformance
    ) -> None:
        name = conformance.name
        lease = 30.0
        first_started, release, rerun = anyio.Event(), anyio.Event(), anyio.Event()

        async def dies(job: Job, ctx: JobContext) -> None:
            first_started.set()
            await release.wait()

        async def recovers(job: Job, ctx: JobContext) -> None:
            rerun.set()

        async with conformance.factory.open(sweep_interval=5) as q:
            await q.enqueue(name, "x")
            dead_worker = await q.consume(
                name, dies, lease=lease, heartbeat=False, poll_interval=0.05
            )
            await wait_for(first_started, "the first worker to take the job")
            other = await q.consume(name, recovers, poll_interval=0.05)
            conformance.advance(lease + 5)  # no sweep() call: the timer does it
            await wait_for(rerun, "the sweep timer to hand the job to the other worker")
            release.set()
            await stop(dead_worker, other)
            assert dead_worker.stats.stale == 1
            assert other.stats.succeeded == 1
            assert await q.size(name) == 0

    async def test_sweep_with_nothing_expired_returns_zero(self, conformance: Conformance) -> None:
        await conformance.queue.enqueue(conformance.name, "x")
        conformance.advance(3600)
        assert await conformance.queue.sweep() == 0
        assert await conformance.queue.sweep(backend=BACKEND) == 0
        assert await conformance.size() == 1


@requires_virtual_leases
class TestHeartbeat:
    async def test_consume_heartbeat_keeps_slow_handler_lease(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        lease = 30.0
        step = lease / 3 - 1  # the clock never jumps over a whole heartbeat period
        await q.enqueue(name, "slow")
        started, finish = anyio.Event(), anyio.Event()
        contexts: list[JobContext] = []

        async def slow(job: Job, ctx: JobContext) -> None:
            contexts.append(ctx)
            started.set()
            await finish.wait()

        consumer = await q.consume(name, slow, lease=lease, poll_interval=0.05)
        await wait_for(started, "the handler to start")
        [ctx] = contexts
        for _ in range(12):  # about 3.5 leases of virtual time
            conformance.advance(step)
            renewed = conformance.now() + lease - lease / 3

            def caught_up(ctx: JobContext = ctx, renewed: float = renewed) -> bool:
                return ctx.lease_expires_at.timestamp() >= renewed

            await wait_until(caught_up, "the heartbeat to renew the lease")
            assert await q.sweep() == 0
            assert await conformance.leasable() == 0
            assert await conformance.size() == 1
        finish.set()
        await stop(consumer)
        assert (consumer.stats.succeeded, consumer.stats.stale) == (1, 0)
        assert await conformance.size() == 0

    async def test_consume_without_heartbeat_loses_slow_handler_lease(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        lease = 30.0
        await q.enqueue(name, "slow")
        started, finish = anyio.Event(), anyio.Event()

        async def slow(job: Job, ctx: JobContext) -> None:
            started.set()
            await finish.wait()

        consumer = await q.consume(name, slow, lease=lease, heartbeat=False, poll_interval=0.05)
        await wait_for(started, "the handler to start")
        conformance.advance(lease + 1)
        assert await q.sweep() == 1
        rerun = await q.tick(name, succeed)  # at least once: the job runs again
        assert rerun.succeeded == 1
        finish.set()
        await stop(consumer)
        assert (consumer.stats.succeeded, consumer.stats.stale) == (0, 1)
        assert await conformance.size() == 0


@requires_virtual_leases
class TestExtendLease:
    async def test_extend_lease_keeps_tick_job_past_its_lease(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        leased_at = conformance.now()
        seen: dict[str, Any] = {}

        async def long(job: Job, ctx: JobContext) -> None:
            seen["extended"] = await ctx.extend_lease(30)
            seen["expires"] = ctx.lease_expires_at
            conformance.advance(LEASE + 25)
            seen["swept"] = await q.sweep()
            seen["leasable"] = (await q.tick(name, succeed)).leased

        result = await _tick_one_job(conformance, long, "long")
        assert seen["extended"] is True
        assert seen["expires"] == datetime.fromtimestamp(leased_at + LEASE + 30, UTC)
        assert (seen["swept"], seen["leasable"]) == (0, 0)
        assert (result.succeeded, result.stale) == (1, 0)
        assert await conformance.size() == 0

    async def test_extend_lease_after_losing_the_lease_returns_false(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        seen: dict[str, Any] = {}

        async def late(job: Job, ctx: JobContext) -> None:
            conformance.advance(LEASE + 1)
            await q.sweep()
            seen["extended"] = await ctx.extend_lease(60)

        result = await _tick_one_job(conformance, late, "late")
        assert seen["extended"] is False
        assert result.stale == 1
        assert await conformance.leasable() == 1  # the sweep's re-pend stands

    async def test_extend_lease_refuses_bad_seconds(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        codes: list[str] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            for bad in (0, -1, math.nan, math.inf, "10", True):
                try:
                    await ctx.extend_lease(bad)  # type: ignore[arg-type]
                except QueueError as exc:
                    codes.append(exc.code)

        result = await q.tick(name, handler)
        assert codes == ["queue/bad-argument"] * 6
        assert result.succeeded == 1
