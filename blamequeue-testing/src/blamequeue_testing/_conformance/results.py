"""SPEC §10 and §2's result errors: ``Queue.result`` (a handler's return value, kept while the
job is retained), ``ctx.dependency_results()`` in flows, and live progress events through
``Queue.subscribe``.

The tests run on backends that declare ``Capabilities.results`` (and ``flows`` /
``progress_events`` where they need them); on the others, :class:`TestWithoutResults` checks
that both calls are refused with ``queue/results-unsupported``.  A waiter wakes as soon as the
backend tells it the job settled; a backend that only polls is driven by advancing the virtual
clock (:func:`_until_done`), so no test depends on real time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from blamequeue import FlowChild, Job, JobContext, Queue, QueueError
from blamequeue.abc import Inspection
from blamequeue.errors import JobFailedError

from .fixtures import BACKEND, SAFETY_NET, Conformance, fail, wait_for
from .refusals import refused
from .requirements import lacking, requires
from .running import dead_job, done_job

__all__ = ["TestFlowResults", "TestProgressEvents", "TestResults", "TestWithoutResults"]

POLL = 1.0
"""The slowest a waiter polls a backend that cannot tell it of settlements (seconds)."""


async def _until_done(conformance: Conformance, done: anyio.Event, what: str) -> None:
    """Let a waiter notice a settlement: pushed, or polled as the virtual clock moves on."""
    try:
        with anyio.fail_after(SAFETY_NET):
            while not done.is_set():
                with anyio.move_on_after(0.05):
                    await done.wait()
                if not done.is_set():
                    conformance.advance(POLL)
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


async def _in_background(
    conformance: Conformance,
    call: Callable[[], Awaitable[Any]],
    then: Callable[[], Awaitable[Any]],
) -> Any:
    """Start ``call`` (a waiter), run ``then`` (which ends the job), return what ``call``
    returned or raise what it raised."""
    outcome: list[Any] = []
    failure: list[BaseException] = []
    done = anyio.Event()

    async def run() -> None:
        try:
            outcome.append(await call())
        except QueueError as exc:
            failure.append(exc)
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.01)  # the waiter may look before or after the job ends: both count
        await then()
        await _until_done(conformance, done, "the waiter to see the job end")
    if failure:
        raise failure[0]
    return outcome[0]


def _returning(value: Any) -> Callable[[Job, JobContext], Awaitable[Any]]:
    async def handler(job: Job, ctx: JobContext) -> Any:
        return value

    return handler


@requires("results", "Queue.result() needs a backend that keeps results")
class TestResults:
    async def test_result_is_the_handlers_return_value(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, {"n": 2})
        value = {"sum": 5, "items": ["a", None, 1.5], "ok": True}
        assert (await q.tick(name, _returning(value))).succeeded == 1
        assert await q.result(job_id) == value

    async def test_result_of_a_handler_returning_nothing_is_none(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await done_job(q, name, None)
        assert await q.result(job_id, timeout=0) is None

    async def test_result_of_a_sync_handler(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, 20)
        await q.tick(name, lambda job, ctx: job.payload + 1)
        assert await q.result(job_id) == 21

    async def test_result_waits_for_a_job_that_finishes_later(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        value = await _in_background(
            conformance,
            lambda: q.result(job_id, timeout=3600),
            lambda: q.tick(name, _returning("later")),
        )
        assert value == "later"

    async def test_result_of_a_dead_job_raises_job_failed_with_its_last_error(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name, None)
        with pytest.raises(JobFailedError) as info:
            await q.result(job_id)
        assert info.value.code == "queue/job-failed"
        assert f"conformance failure of {job_id}" in info.value.message
        assert info.value.state == "dead"
        assert info.value.last_error is not None
        assert info.value.last_error.startswith("RuntimeError: conformance failure")

    async def test_a_waiter_learns_of_the_failure_when_the_job_dies(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None, max_attempts=1)
        await refused(
            "queue/job-failed",
            _in_background(conformance, lambda: q.result(job_id), lambda: q.tick(name, fail)),
        )

    async def test_a_waiter_learns_of_the_failure_when_the_sweep_dead_letters_the_job(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_leases()
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None, max_attempts=1)
        backend = q._runtimes[BACKEND].backend  # a worker that leased the job, then died
        await backend.lease(name, limit=1, now=conformance.now(), lease_seconds=30)

        async def expire() -> None:
            conformance.advance(31)
            await q.sweep()

        with pytest.raises(JobFailedError) as info:
            await _in_background(conformance, lambda: q.result(job_id), expire)
        assert "lease expired" in info.value.message

    async def test_a_job_being_retried_has_no_result_yet(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None, max_attempts=3)
        await q.tick(name, fail)
        info = await refused("queue/result-timeout", q.result(job_id, timeout=0))
        assert "pending" in info.message

    async def test_result_times_out_on_the_queue_clock(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        outcome: list[QueueError] = []
        done = anyio.Event()

        async def wait() -> None:
            try:
                await q.result(job_id, timeout=30)
            except QueueError as exc:
                outcome.append(exc)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)  # its deadline is set before its first await
            await anyio.sleep(0.01)
            await conformance.clock.advance_and_settle(29.9)
            assert not done.is_set()
            await conformance.clock.advance_and_settle(0.2)
            # A waiter between two looks may sleep a little past the deadline: keep time going.
            await _until_done(conformance, done, "result() to time out")
        assert outcome[0].code == "queue/result-timeout"
        assert job_id in outcome[0].message
        assert isinstance(outcome[0], TimeoutError)

    async def test_result_of_an_unknown_job_is_job_not_found(
        self, conformance: Conformance
    ) -> None:
        await refused(
            "queue/job-not-found", conformance.queue.result("job-does-not-exist", timeout=5)
        )

    async def test_result_is_gone_once_the_done_job_is_pruned(
        self, conformance: Conformance
    ) -> None:
        async with conformance.factory.open(retain_done=5) as q:
            job_id = await q.enqueue(conformance.name, None)
            await q.tick(conformance.name, _returning(1))
            assert await q.result(job_id) == 1
            conformance.advance(5.001)
            await q.sweep()
            info = await refused("queue/job-not-found", q.result(job_id))
            assert "retain_done" in info.message

    async def test_a_return_value_json_cannot_hold_completes_the_job_but_not_its_result(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        result = await q.tick(name, _returning({"when": object()}))
        assert (result.succeeded, result.failed) == (1, 0)
        assert await q.dlq_size(name) == 0
        info = await refused("queue/bad-payload", q.result(job_id))
        assert "completed" in info.message

    async def test_result_is_sealed_at_rest(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        runtime = q._runtimes[BACKEND]
        if not runtime.codec.sealed:
            pytest.skip("bq_backend_config turns sealing off")
        job_id = await q.enqueue(name, None)
        await q.tick(name, _returning({"secret": "s3cr3t-value"}))
        stored = await Inspection.of(runtime.backend).get_job(job_id)
        assert stored is not None
        assert stored.result is not None
        assert "s3cr3t-value" not in stored.result
        assert await q.result(job_id) == {"secret": "s3cr3t-value"}

    @pytest.mark.parametrize("timeout", [-1, float("nan"), "5", True])
    async def test_a_bad_timeout_is_refused(self, conformance: Conformance, timeout: Any) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, None)
        await refused("queue/bad-argument", q.result(job_id, timeout=timeout))


@requires("flows", "dependency results need flows")
@requires("results", "dependency results need a backend that keeps results")
class TestFlowResults:
    async def _run_flow(self, conformance: Conformance, last: Any) -> dict[str, Any]:
        q, name = conformance.queue, conformance.name
        await q.enqueue_flow(
            name,
            [
                FlowChild(name="fetch", payload=1),
                FlowChild(name="parse", payload=2),
                FlowChild(name="report", payload=3, depends_on=("fetch", "parse")),
            ],
        )

        async def first(job: Job, ctx: JobContext) -> Any:
            return {"from": job.payload}

        assert (await q.tick(name, first, max=2)).succeeded == 2
        result = await q.tick(name, last)
        assert result.succeeded == 1, result
        return {"ok": True}

    async def test_a_flow_job_reads_its_dependencies_results_by_child_name(
        self, conformance: Conformance
    ) -> None:
        seen: list[dict[str, Any]] = []

        async def report(job: Job, ctx: JobContext) -> None:
            seen.append(await ctx.dependency_results())

        await self._run_flow(conformance, report)
        assert seen == [{"fetch": {"from": 1}, "parse": {"from": 2}}]

    async def test_a_sync_flow_handler_reads_them_with_a_plain_call(
        self, conformance: Conformance
    ) -> None:
        seen: list[dict[str, Any]] = []

        def report(job: Job, ctx: Any) -> None:
            seen.append(ctx.dependency_results())

        await self._run_flow(conformance, report)
        assert seen == [{"fetch": {"from": 1}, "parse": {"from": 2}}]

    async def test_a_job_outside_a_flow_has_no_dependency_results(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        seen: list[dict[str, Any]] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            seen.append(await ctx.dependency_results())

        await q.enqueue(name, None)
        await q.tick(name, handler)
        assert seen == [{}]


async def _progress_steps(job: Job, ctx: JobContext) -> str:
    await ctx.progress(25, {"step": "fetch"})
    await ctx.progress(75)
    return "finished"


@requires("progress_events", "Queue.subscribe needs progress events")
class TestProgressEvents:
    async def _collect(self, conformance: Conformance, job_id: str, then: Any) -> list[Any]:
        q = conformance.queue
        events: list[Any] = []
        subscribed = anyio.Event()
        done = anyio.Event()

        async def listen() -> None:
            async with q.subscribe(job_id) as subscription:
                subscribed.set()
                async for event in subscription:
                    events.append(event)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            await wait_for(subscribed, "the subscription to open")
            await then()
            await _until_done(conformance, done, "the subscription to end")
        return events

    async def test_a_subscriber_sees_progress_then_the_end(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        events = await self._collect(conformance, job_id, lambda: q.tick(name, _progress_steps))
        progress = [(e.percent, e.data) for e in events if e.kind == "progress"]
        assert progress == [(25.0, {"step": "fetch"}), (75.0, None)]
        final = events[-1]
        assert final.final
        assert final.kind == "finished"
        assert final.job_id == job_id
        assert final.state in ("done", None)  # None: deleted at once (retain_done=0)
        assert sum(e.final for e in events) == 1
        assert await q.result(job_id) == "finished"

    async def test_the_final_event_of_a_dead_job_carries_its_error(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None, max_attempts=1)
        events = await self._collect(conformance, job_id, lambda: q.tick(name, fail))
        assert [e.kind for e in events] == ["finished"]
        assert events[0].state == "dead"
        assert "conformance failure" in (events[0].error or "")

    async def test_a_finished_job_yields_only_its_final_event(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        await q.tick(name, _progress_steps)
        async with q.subscribe(job_id) as subscription:
            events = [event async for event in subscription]
        assert [e.kind for e in events] == ["finished"]

    async def test_progress_events_are_not_stored(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, None)
        started = anyio.Event()
        release = anyio.Event()

        async def handler(job: Job, ctx: JobContext) -> None:
            await ctx.progress(10, "before anyone listened")
            started.set()
            await release.wait()
            await ctx.progress(90, "after")

        events: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.tick, name, handler)
            await wait_for(started, "the handler to start")
            async with q.subscribe(job_id) as subscription:
                release.set()
                async for event in subscription:
                    events.append(event)
                    if event.kind == "progress":
                        break
        assert [(e.percent, e.data) for e in events] == [(90.0, "after")]

    async def test_subscribing_to_an_unknown_job_is_job_not_found(
        self, conformance: Conformance
    ) -> None:
        with pytest.raises(QueueError) as info:
            async with conformance.queue.subscribe("job-does-not-exist"):
                pass
        assert info.value.code == "queue/job-not-found"

    async def test_progress_data_json_cannot_hold_is_refused_in_the_handler(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        codes: list[str] = []

        async def handler(job: Job, ctx: JobContext) -> None:
            try:
                await ctx.progress(50, {"when": object()})
            except QueueError as exc:
                codes.append(exc.code)

        await q.enqueue(name, None)
        await q.tick(name, handler)
        assert codes == ["queue/bad-payload"]

    async def test_a_subscription_times_out_on_the_queue_clock(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, None)
        failure: list[QueueError] = []
        subscribed = anyio.Event()
        done = anyio.Event()

        async def listen() -> None:
            try:
                async with q.subscribe(job_id, timeout=10) as subscription:
                    subscribed.set()
                    async for _ in subscription:
                        pass
            except QueueError as exc:
                failure.append(exc)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            await wait_for(subscribed, "the subscription to open")
            await conformance.clock.advance_and_settle(10.5)
            await _until_done(conformance, done, "the subscription to time out")
        assert failure[0].code == "queue/result-timeout"

    async def test_iterating_without_async_with_is_refused(self, conformance: Conformance) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, None)
        with pytest.raises(QueueError) as info:
            async for _ in q.subscribe(job_id):
                pass
        assert info.value.code == "queue/bad-argument"


@lacking("results", "TestResults covers it")
class TestWithoutResults:
    async def test_result_and_subscribe_are_refused(self, conformance: Conformance) -> None:
        q: Queue = conformance.queue
        job_id = await q.enqueue(conformance.name, None)
        await refused("queue/results-unsupported", q.result(job_id, timeout=1))
        with pytest.raises(QueueError) as info:
            async with q.subscribe(job_id):
                pass
        assert info.value.code == "queue/results-unsupported"
