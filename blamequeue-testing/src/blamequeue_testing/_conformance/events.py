"""SPEC §9: in-process events (``on`` / ``once`` / ``off`` / ``on_any`` / ``listen``, bound
methods held weakly) raised by every backend's lifecycle, and pause / resume kept in the
backend (``records``), honoured by every queue object sharing the store."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest

import blamequeue
from blamequeue import Job, JobContext, QueueEvent

from .fixtures import Conformance, succeed, wait_until
from .refusals import refused, refused_at_once
from .requirements import requires
from .running import stop

__all__ = ["TestEvents", "TestPause"]


@pytest.mark.anyio
class TestEvents:
    async def test_lifecycle_events_reach_listeners(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        seen: list[tuple[str, str | None]] = []
        queue.on_any(lambda event: seen.append((event.name, event.job_id)))

        async def handler(job: Job, ctx: JobContext) -> None:
            if job.payload == "flaky" and job.attempts == 1:
                raise RuntimeError("try again")
            if job.payload == "doomed":
                raise RuntimeError("never")

        ok = await queue.enqueue(name, "ok")
        flaky = await queue.enqueue(name, "flaky", max_attempts=2)
        doomed = await queue.enqueue(name, "doomed", max_attempts=1)
        await queue.tick(name, handler, max=10)
        names = [n for n, job_id in seen]
        assert names.count("job.added") == 3
        assert ("job.completed", ok) in seen
        assert ("job.retrying", flaky) in seen
        assert ("job.failed", doomed) in seen
        assert names.count("job.processing") == 3
        assert names.index("job.processing") < names.index("job.completed")

    async def test_events_carry_details(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        failures: list[QueueEvent] = []
        queue.on("job.failed", failures.append)

        async def fail(job: Job, ctx: JobContext) -> None:
            raise ValueError("bad input 42")

        job_id = await queue.enqueue(name, 1, max_attempts=1)
        await queue.tick(name, fail)
        [event] = failures
        assert (event.name, event.queue, event.job_id) == ("job.failed", name, job_id)
        assert event.data["attempts"] == 1
        assert "bad input 42" in event.data["error"]

    async def test_once_off_and_unsubscribe(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        once: list[str] = []
        always: list[str] = []

        def record(event: QueueEvent) -> None:
            always.append(event.name)

        queue.once("job.added", lambda event: once.append(event.job_id or ""))
        queue.on("job.added", record)
        subscription = queue.on_any(record)
        await queue.enqueue(name, 1)
        await queue.enqueue(name, 2)
        assert len(once) == 1
        assert always.count("job.added") == 4  # on() and on_any() each, twice
        subscription.unsubscribe()
        subscription.unsubscribe()  # idempotent
        assert queue.off("job.added", record) == 1
        await queue.enqueue(name, 3)
        assert always.count("job.added") == 4

    async def test_decorated_methods_are_held_weakly(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        seen: list[str] = []

        class Mailer:
            @blamequeue.listens_to("job.added", "job.completed")
            def note(self, event: QueueEvent) -> None:
                seen.append(event.name)

        mailer = Mailer()
        queue.listen(mailer)
        await queue.enqueue(name, 1)
        await queue.tick(name, succeed)
        assert seen == ["job.added", "job.completed"]
        del mailer  # its last reference: CPython frees it at once (no gc pass, which would
        # also finalise unrelated objects of other tests)
        await queue.enqueue(name, 2)
        assert seen == ["job.added", "job.completed"]  # its object is gone: so is it

    async def test_bound_methods_via_on_are_weak_too(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        seen: list[str] = []

        class Counter:
            def __call__(self, event: QueueEvent) -> None:
                seen.append("call")

            def method(self, event: QueueEvent) -> None:
                seen.append("method")

        counter = Counter()
        queue.on("job.added", counter.method)
        await queue.enqueue(name, 1)
        del counter
        await queue.enqueue(name, 2)
        assert seen == ["method"]

    async def test_a_failing_listener_does_not_break_the_queue(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name

        def broken(event: QueueEvent) -> None:
            raise RuntimeError("listener bug")

        later: list[str] = []
        queue.on("job.completed", broken)
        queue.on("job.completed", lambda event: later.append(event.name))
        await queue.enqueue(name, 1)
        result = await queue.tick(name, succeed)
        assert result.succeeded == 1
        assert later == ["job.completed"]

    async def test_async_listeners_run_off_the_hot_path(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        release = anyio.Event()
        done: list[str] = []

        async def slow(event: QueueEvent) -> None:
            await release.wait()
            done.append(event.job_id or "")

        queue.on("job.completed", slow)
        job_id = await queue.enqueue(name, 1)
        result = await queue.tick(name, succeed)  # returns while the listener still waits
        assert result.succeeded == 1
        assert done == []
        release.set()
        await wait_until(lambda: done == [job_id], "the async listener")

    async def test_progress_and_worker_events(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        seen: list[QueueEvent] = []
        queue.on_any(seen.append)
        finished = anyio.Event()

        async def handler(job: Job, ctx: JobContext) -> None:
            await ctx.progress(50, {"step": "half"})
            finished.set()

        consumer = await queue.consume(name, handler)
        await queue.enqueue(name, 1)
        with anyio.fail_after(10):
            await finished.wait()
        await stop(consumer)
        names = [event.name for event in seen]
        assert names[0] == "worker.started"
        assert names[-1] == "worker.stopped"
        [progress] = [event for event in seen if event.name == "job.progress"]
        assert progress.data == {"percent": 50.0, "data": {"step": "half"}}
        assert seen[0].data["worker_id"] == consumer.id

    async def test_unknown_events_and_bad_listeners_are_refused(
        self, conformance: Conformance
    ) -> None:
        queue = conformance.queue
        calls: list[Callable[[], object]] = [
            lambda: queue.on("job.exploded", print),
            lambda: queue.on("job.added", "not callable"),  # type: ignore[arg-type]
            lambda: queue.listen(object()),
            lambda: blamequeue.listens_to("nope"),
        ]
        for call in calls:
            refused_at_once("queue/bad-argument", call)


@requires("records", "the backend keeps no shared records for pause flags")
class TestPause:
    async def test_a_paused_queue_is_not_leased_by_any_queue_object(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        events: list[str] = []
        queue.on_any(lambda event: events.append(event.name))
        assert await queue.pause(name)
        assert not await queue.pause(name)  # already paused
        assert await queue.is_paused(name)
        await queue.enqueue(name, "taken while paused")
        async with conformance.factory.open() as other:  # another worker, same store
            await conformance.require_shared_store(queue, other)
            assert await other.is_paused(name)
            assert (await other.tick(name, succeed)).leased == 0
            assert (await queue.tick(name, succeed)).leased == 0
            assert await other.resume(name)
            assert not await other.resume(name)
            assert not await queue.is_paused(name)
            assert (await queue.tick(name, succeed)).succeeded == 1
        assert [e for e in events if e.startswith("queue.")] == ["queue.paused"]
        assert [e.name for e in conformance.audit.events if "paused" in e.name] == [
            "system.queue.paused"
        ]

    async def test_a_running_consumer_stops_and_resumes(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        ran: list[object] = []
        got = anyio.Event()

        async def handler(job: Job, ctx: JobContext) -> None:
            ran.append(job.payload)
            got.set()

        await queue.pause(name)  # before the consumer starts: no lease of its can be in flight
        consumer = await queue.consume(name, handler, poll_interval=0.01)
        await queue.enqueue(name, "waits")
        # The consumer looks at the flag before each lease: the job stays pending.
        for _ in range(50):
            await anyio.lowlevel.checkpoint()
        assert ran == []
        assert await queue.size(name) == 1
        await queue.resume(name)  # wakes this process's consumer at once
        with anyio.fail_after(10):
            await got.wait()
        assert ran == ["waits"]
        await stop(consumer)

    async def test_pause_checks_its_argument(self, conformance: Conformance) -> None:
        await refused("queue/bad-argument", conformance.queue.pause(""))
