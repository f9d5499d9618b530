"""SPEC §15: ``enqueue(..., lifo=True)`` puts the job ahead of every due job of the same
priority already waiting.

Among one priority the lifo jobs come first, the one due latest first (so a delayed lifo job
goes ahead of the jobs waiting when it comes due, and of lifo jobs due before it), then the
others in the usual order.  Backends whose capabilities exclude ``lifo`` refuse with
``queue/lifo-unsupported``.
"""

from __future__ import annotations

from typing import Any

import pytest

from blamequeue import Job, JobContext

from .fixtures import Conformance
from .refusals import refused
from .requirements import lacking, requires
from .running import lease_order

__all__ = ["TestLifo", "TestLifoArguments", "TestWithoutLifo"]


@requires("lifo", "the backend cannot lease a job ahead of the jobs already waiting")
class TestLifo:
    async def test_a_lifo_job_leases_ahead_of_the_due_jobs_already_waiting(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        for payload in ("a", "b", "c"):
            await q.enqueue(name, payload)
        await q.enqueue(name, "last in", lifo=True)
        await q.enqueue(name, "d")
        assert await lease_order(conformance) == ["last in", "a", "b", "c", "d"]

    async def test_the_latest_lifo_job_leases_first(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "plain")
        for payload in ("first lifo", "second lifo", "third lifo"):
            await q.enqueue(name, payload, lifo=True)
        assert await lease_order(conformance) == [
            "third lifo",
            "second lifo",
            "first lifo",
            "plain",
        ]

    async def test_enqueue_many_with_lifo_leases_its_last_job_first(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "plain")
        await q.enqueue_many(name, ["x", "y", "z"], lifo=True)
        assert await lease_order(conformance) == ["z", "y", "x", "plain"]

    async def test_a_higher_priority_still_leases_first(self, conformance: Conformance) -> None:
        conformance.require("priority", "priorities cannot be checked")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "low")
        await q.enqueue(name, "high", priority=1)
        await q.enqueue(name, "lifo", lifo=True)
        await q.enqueue(name, "lifo, lower", priority=-1, lifo=True)
        assert await lease_order(conformance) == ["high", "lifo", "low", "lifo, lower"]

    async def test_a_delayed_lifo_job_goes_ahead_once_due(self, conformance: Conformance) -> None:
        conformance.require("delay", "due times cannot be checked")
        conformance.require_virtual_time("due times are reached by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "delayed lifo", lifo=True, delay=10)
        await q.enqueue(name, "lifo, due at once", lifo=True)
        await q.enqueue(name, "waiting")
        assert await lease_order(conformance, max=1) == ["lifo, due at once"]
        await q.enqueue(name, "lifo again", lifo=True)
        conformance.advance(10)
        await q.enqueue(name, "after")
        # Due last of the lifo jobs, so ahead of them all: lifo goes by when a job came due.
        assert await lease_order(conformance) == ["delayed lifo", "lifo again", "waiting", "after"]

    async def test_a_retried_lifo_job_goes_ahead_again_once_due(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "retry backoff cannot be checked")
        conformance.require_virtual_time("the backoff is waited out by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "lifo", lifo=True, max_attempts=2, backoff=[5])
        seen: list[Any] = []

        async def fail_first(job: Job, ctx: JobContext) -> None:
            seen.append(job.payload)
            if job.payload == "lifo" and job.attempts == 1:
                raise RuntimeError("first attempt fails")

        await q.tick(name, fail_first)
        await q.enqueue(name, "waiting")
        conformance.advance(5)
        await q.tick(name, fail_first)
        assert seen == ["lifo", "lifo", "waiting"]

    async def test_an_edited_or_cancelled_lifo_job_keeps_its_lifo_place(
        self, conformance: Conformance
    ) -> None:
        conformance.require("job_edits", "a stored job cannot be edited")
        conformance.require("cancel", "a job cannot be cancelled")
        conformance.require("priority", "priorities cannot be checked")
        conformance.require_virtual_time("the promotion comes later by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "plain")
        delayed = await q.enqueue(name, "promoted lifo", lifo=True, delay=60)
        lower = await q.enqueue(name, "raised lifo", lifo=True, priority=-1)
        gone = await q.enqueue(name, "cancelled lifo", lifo=True)
        conformance.advance(1)
        assert await q.promote(delayed)
        assert await q.change_priority(lower, 0)
        assert await q.cancel(gone)
        # Promoted last, so due latest: first of the lifo jobs; the cancelled one is gone.
        assert await lease_order(conformance) == ["promoted lifo", "raised lifo", "plain"]


@lacking("lifo", "TestLifo covers it")
class TestWithoutLifo:
    async def test_lifo_is_refused_and_nothing_is_stored(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        info = await refused("queue/lifo-unsupported", q.enqueue(name, "x", lifo=True))
        assert "lifo" in info.message
        await refused("queue/lifo-unsupported", q.enqueue_many(name, ["a", "b"], lifo=True))
        assert await q.size(name) == 0


@pytest.mark.anyio
class TestLifoArguments:
    async def test_lifo_must_be_a_bool(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        bad: Any
        for bad in ("yes", 1, 0, None):
            info = await refused("queue/bad-argument", q.enqueue(name, "x", lifo=bad), case=bad)
            assert "lifo" in info.message
        assert await q.size(name) == 0
