"""SPEC §3.12: done jobs are kept ``retain_done`` seconds and pruned by the sweep; dead jobs are
kept until retried or purged.

The public API cannot see a done job yet (``Queue.get_job`` is not there), so whether done rows
are left is read through the backend contract itself: a sweep with ``retain_done=0`` a second
later prunes every done row left and reports how many (``SweepResult.pruned``).  It deletes
them, so each test looks once, at its end.
"""

from __future__ import annotations

import pytest

from blamequeue import Queue

from .fixtures import BACKEND, Conformance, succeed
from .running import dead_job, done_job

__all__ = ["TestRetention"]


async def _done_rows_left(queue: Queue, now: float) -> int:
    backend = queue._runtimes[BACKEND].backend  # no public way to see a done job yet
    result = await backend.sweep(now=now + 1.0, retain_done=0.0, expired_error="probe")
    return result.pruned


async def _done_rows_left_after(
    conformance: Conformance, *, retain_done: float, seconds: float
) -> int:
    """On a queue keeping done jobs ``retain_done`` seconds, complete one job, move the clock
    ``seconds`` past its completion and sweep; the done rows left."""
    async with conformance.factory.open(retain_done=retain_done) as q:
        await done_job(q, conformance.name)
        conformance.advance_to(conformance.now() + seconds)
        await q.sweep()
        return await _done_rows_left(q, conformance.now())


@pytest.mark.anyio
class TestRetention:
    async def test_done_job_is_kept_until_retain_done_has_passed(
        self, conformance: Conformance
    ) -> None:
        conformance.require_retained_done_jobs()
        assert await _done_rows_left_after(conformance, retain_done=5, seconds=4.999) == 1

    async def test_sweep_prunes_done_job_after_retain_done(self, conformance: Conformance) -> None:
        assert await _done_rows_left_after(conformance, retain_done=5, seconds=5.001) == 0

    async def test_retain_done_zero_deletes_done_job_at_once(
        self, conformance: Conformance
    ) -> None:
        async with conformance.factory.open(retain_done=0) as q:
            await q.enqueue(conformance.name, "x")
            result = await q.tick(conformance.name, succeed)
            assert result.succeeded == 1
            assert await _done_rows_left(q, conformance.now()) == 0

    async def test_done_job_is_kept_by_default(self, conformance: Conformance) -> None:
        conformance.require_default("retain_done")
        conformance.require_retained_done_jobs()
        q = conformance.queue
        await done_job(q, conformance.name)
        conformance.advance(3599)
        await q.sweep()
        assert await _done_rows_left(q, conformance.now()) == 1

    async def test_purge_deletes_retained_done_jobs_without_counting_them(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await done_job(q, name)
        await q.enqueue(name, "live")
        assert await q.purge(name) == 1
        assert await _done_rows_left(q, conformance.now()) == 0

    async def test_dead_jobs_are_not_pruned_by_retention(self, conformance: Conformance) -> None:
        conformance.require("dlq", "dead jobs cannot be looked at")
        async with conformance.factory.open(retain_done=0) as q:
            await dead_job(q, conformance.name)
            conformance.advance(30 * 24 * 3600)
            await q.sweep()
            assert await q.dlq_size(conformance.name) == 1
            assert len(await q.dlq_list(conformance.name)) == 1
