"""SPEC §2 ``size`` and ``purge``: what counts as a live job, and deleting them."""

from __future__ import annotations

from typing import Any

import pytest

from blamequeue import Job, JobContext

from .fixtures import Conformance
from .running import dead_job, done_job

__all__ = ["TestPurge", "TestSize"]


@pytest.mark.anyio
class TestSize:
    async def test_size_counts_pending_inflight_and_delayed_but_not_done_or_dead(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await done_job(q, name)
        await dead_job(q, name)
        await q.enqueue(name, "inflight")
        await q.enqueue(name, "pending")
        if conformance.capabilities.delay:
            await q.enqueue(name, "delayed", delay=3600)
        live = 3 if conformance.capabilities.delay else 2
        during: list[int] = []

        async def measure(job: Job, ctx: JobContext) -> None:
            during.append(await q.size(name))

        await q.tick(name, measure, max=1)
        assert during == [live]
        assert await q.size(name) == live - 1

    async def test_size_of_unknown_queue_is_zero(self, conformance: Conformance) -> None:
        assert await conformance.queue.size(f"{conformance.name}-never-used") == 0

    async def test_size_counts_only_its_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2])
        await q.enqueue(f"{name}-other", 3)
        assert await q.size(name) == 2


@pytest.mark.anyio
class TestPurge:
    async def test_purge_deletes_live_jobs_and_returns_their_count(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a", "b"])
        if conformance.capabilities.delay:
            await q.enqueue(name, "delayed", delay=60)
        live = 3 if conformance.capabilities.delay else 2
        assert await q.purge(name) == live
        assert await q.size(name) == 0
        conformance.advance(120)
        assert await conformance.leasable() == 0

    async def test_purge_leaves_the_dlq_alone(self, conformance: Conformance) -> None:
        conformance.require("dlq", "there is no dead-letter queue to keep")
        q, name = conformance.queue, conformance.name
        await dead_job(q, name)
        await q.enqueue(name, "live")
        assert await q.purge(name) == 1
        assert await q.dlq_size(name) == 1

    async def test_purge_deletes_inflight_jobs_and_their_settlement_is_stale(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["running", "waiting"])
        seen: dict[str, Any] = {}

        async def purging(job: Job, ctx: JobContext) -> None:
            seen["purged"] = await q.purge(name)

        result = await q.tick(name, purging, max=1)
        assert seen["purged"] == 2  # the inflight job and the pending one
        assert (result.stale, result.succeeded) == (1, 0)
        assert await q.size(name) == 0
        conformance.advance(3600)
        await q.sweep()
        assert await conformance.leasable() == 0

    async def test_purge_leaves_other_queues_alone(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "mine")
        await q.enqueue(f"{name}-other", "theirs")
        assert await q.purge(name) == 1
        assert await q.size(f"{name}-other") == 1

    async def test_purge_of_empty_queue_returns_zero(self, conformance: Conformance) -> None:
        assert await conformance.queue.purge(conformance.name) == 0
