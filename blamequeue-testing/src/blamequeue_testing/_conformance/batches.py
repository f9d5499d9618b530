"""SPEC §9: batches of task jobs with then / catch / finally / progress callbacks, kept in the
backend's shared records (``records``), so any queue object (process) sharing the store sees
the same batch and finishes it."""

from __future__ import annotations

from typing import Any

import pytest

from blamequeue import JobContext, Queue, QueueError

from .fixtures import Conformance
from .refusals import refused, refused_at_once
from .requirements import lacking, requires

__all__ = ["TestBatches", "TestWithoutBatches"]


def _tasks(queue: Queue, name: str) -> list[tuple[str, Any]]:
    """Register the tasks the tests use; returns the callbacks that ran (name, payload)."""
    ran: list[tuple[str, Any]] = []

    @queue.task(name="Import", queue=name, tries=1)
    async def import_row(payload: Any, ctx: JobContext) -> None:
        if payload == "bad":
            raise ValueError("row rejected")

    for callback in ("Done", "Failed", "Always", "Step"):

        async def record(payload: Any, ctx: JobContext, callback: str = callback) -> None:
            ran.append((callback, payload))

        queue.task(name=callback, queue=f"{name}-callbacks")(record)
    return ran


async def _drain(queue: Queue, name: str) -> None:
    handler = queue.tasks
    for _ in range(20):
        work = await queue.tick(name, handler, max=50)
        side = await queue.tick(f"{name}-callbacks", handler, max=50)
        if not work.leased and not side.leased:
            return


@requires("records", "the backend keeps no shared records for batches")
class TestBatches:
    async def test_then_and_finally_fire_once_the_batch_succeeds(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        ran = _tasks(queue, name)
        events: list[str] = []
        queue.on_any(lambda event: events.append(event.name) if "batch" in event.name else None)
        batch = await (
            queue.batch([queue.job("Import", n) for n in range(3)] + [("Import", 3)])
            .name("nightly import")
            .then("Done", {"to": "ops"})
            .catch("Failed")
            .finally_("Always")
            .progress("Step")
            .dispatch()
        )
        assert (batch.total, batch.pending, batch.progress) == (4, 4, 0.0)
        assert batch.name == "nightly import"
        assert not batch.finished
        await _drain(queue, name)
        batch = await batch.refresh()
        assert (batch.pending, batch.processed, batch.failed, batch.progress) == (0, 4, 0, 100.0)
        assert batch.finished
        assert sorted(c for c, _ in ran) == ["Always", "Done", "Step", "Step", "Step", "Step"]
        assert ("Done", {"to": "ops"}) in ran
        assert [b.id for b in await queue.batches()] == [batch.id]
        assert events == ["batch.added", "batch.completed"]

    async def test_a_failure_fires_catch_and_cancels_the_rest(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        ran = _tasks(queue, name)
        batch = await (
            queue.batch([("Import", "bad"), ("Import", 1), ("Import", 2)])
            .then("Done")
            .catch("Failed")
            .finally_("Always")
            .dispatch()
        )
        handler = queue.tasks
        await queue.tick(name, handler, max=1)  # the bad row fails for good
        batch = await batch.refresh()
        assert batch.cancelled
        assert batch.failed == 1
        assert len(batch.failed_job_ids) == 1
        await _drain(queue, name)  # the other two complete without running
        batch = await batch.refresh()
        assert (batch.pending, batch.processed, batch.failed) == (0, 2, 1)
        assert sorted(c for c, _ in ran) == ["Always", "Failed"]  # no "Done"

    async def test_allow_failures_keeps_going(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        ran = _tasks(queue, name)
        batch = await (
            queue.batch([("Import", "bad"), ("Import", 1)])
            .allow_failures()
            .then("Done")
            .catch("Failed")
            .finally_("Always")
            .dispatch()
        )
        await _drain(queue, name)
        batch = await batch.refresh()
        assert not batch.cancelled
        assert (batch.processed, batch.failed, batch.has_failures) == (1, 1, True)
        assert sorted(c for c, _ in ran) == ["Always", "Failed"]

    async def test_cancel_add_find_and_prune(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name
        _tasks(queue, name)
        batch = await queue.batch([("Import", 1)]).dispatch()
        [second] = await batch.add([("Import", 2)])
        assert (await batch.refresh()).total == 2
        async with conformance.factory.open() as other:  # another process sees it
            await conformance.require_shared_store(queue, other)
            seen = await other.find_batch(batch.id)
            assert seen is not None
            assert seen.total == 2
            assert await other.cancel_batch(batch.id)
        assert not await batch.cancel()  # cancelled already
        await _drain(queue, name)
        batch = await batch.refresh()
        assert batch.finished
        assert batch.cancelled
        assert await queue.get_job(second) is not None
        assert await queue.prune_batches(older_than=3600) == 0  # finished just now
        conformance.clock.advance(3601)
        assert await queue.prune_batches(older_than=3600) == 1
        assert await queue.find_batch(batch.id) is None
        await refused("queue/job-not-found", queue.add_to_batch(batch.id, [("Import", 3)]))

    async def test_bad_batches_are_refused_and_store_nothing(
        self, conformance: Conformance
    ) -> None:
        queue, name = conformance.queue, conformance.name
        _tasks(queue, name)
        for jobs, code in [
            ([], "queue/bad-argument"),
            ([("NoSuchTask", 1)], "queue/unknown-job"),
            (["not a job"], "queue/bad-argument"),
            ("Import", "queue/bad-argument"),
        ]:
            with pytest.raises(QueueError) as caught:
                await queue.batch(jobs).dispatch()  # type: ignore[arg-type]
            assert caught.value.code == code
        refused_at_once(
            "queue/unknown-job", lambda: queue.batch([("Import", 1)]).then("NoSuchTask")
        )
        await refused("queue/bad-payload", queue.batch([("Import", object())]).dispatch())
        assert await queue.batches() == []
        assert await queue.size(name) == 0
        await refused("queue/bad-argument", queue.prune_batches(older_than=-1))


@lacking("records", "TestBatches covers it")
class TestWithoutBatches:
    async def test_batches_need_records(self, conformance: Conformance) -> None:
        queue, name = conformance.queue, conformance.name

        @queue.task(name="Import", queue=name)
        async def import_row(payload: Any, ctx: JobContext) -> None:
            pass

        await refused("queue/records-unsupported", queue.batch([("Import", 1)]).dispatch())
        assert await queue.size(name) == 0
