"""SPEC §15: ``Queue.watch(queue_name)`` yields the queue's events raised by **any** queue
object sharing the store (another process, here another ``Queue``), from the moment it is
entered, in order per job; the store keeps names, ids, counts, times and an error's type,
never a payload or an error's text.  Backends whose capabilities exclude ``queue_events``
refuse with ``queue/watch-unsupported``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from blamequeue import Job, JobContext, QueueEvent
from blamequeue._queue_watch import encode_event
from blamequeue.abc import QueueEvents

from .fixtures import BACKEND, Conformance, succeed
from .refusals import refused_at_once
from .requirements import lacking, requires

__all__ = ["TestQueueEvents", "TestWithoutQueueEvents"]


async def _take(
    events: AsyncIterator[QueueEvent], count: int, *, jobs_only: bool = False
) -> list[QueueEvent]:
    """The next ``count`` events of a watch (of jobs only: no ``queue.drained``), at most 10 s
    of real time."""
    got: list[QueueEvent] = []
    with anyio.fail_after(10):
        async for event in events:
            if jobs_only and event.job_id is None:
                continue
            got.append(event)
            if len(got) == count:
                break
    return got


def _per_job(events: list[QueueEvent]) -> dict[str | None, list[tuple[str, object]]]:
    jobs: dict[str | None, list[tuple[str, object]]] = {}
    for event in events:
        jobs.setdefault(event.job_id, []).append((event.name, event.data.get("attempts")))
    return jobs


async def _flaky(job: Job, ctx: JobContext) -> None:
    if job.payload == "doomed" or job.attempts == 1:
        raise ValueError(f"secret {job.payload}")


@requires("queue_events", "the backend carries no queue events between processes")
class TestQueueEvents:
    async def test_a_watch_sees_every_queue_objects_events_in_order_per_job(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        before = await queue.enqueue(name, "before the watch")
        await queue.tick(name, succeed)
        async with (
            conformance.factory.open() as other,
            queue.watch(name) as events,
        ):
            await conformance.require_shared_store(queue, other)
            flaky = await other.enqueue(name, "flaky", max_attempts=2)
            doomed = await other.enqueue(name, "doomed", max_attempts=1)
            await other.tick(name, _flaky, max=10)
            conformance.advance(3600)  # the retry's backoff
            await queue.tick(name, _flaky, max=10)
            got = await _take(events, 10, jobs_only=True)
        jobs = _per_job(got)
        assert before not in jobs
        assert jobs[flaky] == [
            ("job.added", None),
            ("job.processing", 1),
            ("job.failed", 1),
            ("job.retrying", 1),
            ("job.processing", 2),
            ("job.completed", 2),
        ]
        assert jobs[doomed] == [
            ("job.added", None),
            ("job.processing", 1),
            ("job.failed", 1),
            ("job.dead", 1),
        ]
        assert {event.queue for event in got} == {name}

    async def test_the_store_keeps_no_payload_and_no_error_text(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        async with conformance.factory.open() as other, queue.watch(name) as events:
            await conformance.require_shared_store(queue, other)
            job_id = await other.enqueue(name, "doomed", max_attempts=1)
            await other.tick(name, _flaky)
            got = await _take(events, 4, jobs_only=True)
        failed = next(event for event in got if event.name == "job.failed")
        assert failed.job_id == job_id
        assert failed.data == {"attempts": 1, "dead": True, "error_type": "ValueError"}
        assert "secret" not in repr(got)

    async def test_pause_and_resume_reach_the_watch(self, conformance: Conformance) -> None:
        conformance.require("records", "pause flags are shared records")
        queue, name = conformance.queue, conformance.name
        async with queue.watch(name) as events:
            await queue.pause(name)
            await queue.resume(name)
            got = await _take(events, 2)
        assert [(event.name, event.job_id) for event in got] == [
            ("queue.paused", None),
            ("queue.resumed", None),
        ]

    async def test_drained_once_each_time_the_last_due_job_is_leased(
        self, conformance: Conformance
    ) -> None:
        conformance.require("next_due", "the store cannot say whether jobs are still due")
        queue, name = conformance.queue, conformance.name
        async with queue.watch(name) as events:
            for count in (2, 1):
                for _ in range(count):
                    await queue.enqueue(name, "x")
                await queue.tick(name, succeed, max=10)
                got = await _take(events, 3 * count + 1)
                assert [event.name for event in got].count("queue.drained") == 1

    async def test_a_watch_the_capped_log_left_behind_is_told_of_the_gap(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        backend = QueueEvents.of(queue._runtimes[BACKEND].backend)
        now = conformance.now()
        # More than any backend keeps (the contract: at most about 20,000 per queue).
        burst = [encode_event("queue.drained", at=now, job_id=None, data={})] * 25_000
        async with queue.watch(name) as events:
            await backend.publish_events(name, burst, now=now)
            first, second = await _take(events, 2)
        assert first.name == "watch.gap"
        assert second.name == "queue.drained"

    async def test_iterating_outside_the_block_is_refused(self, conformance: Conformance) -> None:
        watch = conformance.queue.watch(conformance.name)
        with pytest.raises(Exception) as caught:
            await watch.__anext__()
        assert getattr(caught.value, "code", None) == "queue/bad-argument"


@lacking("queue_events", "TestQueueEvents covers it")
class TestWithoutQueueEvents:
    async def test_watch_is_refused_with_watch_unsupported(self, conformance: Conformance) -> None:
        refused_at_once(
            "queue/watch-unsupported", lambda: conformance.queue.watch(conformance.name)
        )
