"""SPEC §3.12: done jobs are kept ``retain_done`` seconds and pruned by the sweep; dead jobs are
kept until retried or purged, unless ``retain_dead`` (seconds) says otherwise;
``retain_done_count`` / ``retain_dead_count`` keep at most the N most recently finished of each
per queue (0 keeps none).  Cancelled jobs are kept like done ones: they share ``retain_done``
and count with the done jobs of their queue towards ``retain_done_count``.

Whether done rows are left is read through the backend contract where the public API cannot
see them (a backend without ``Inspection``): a sweep with ``retain_done=0`` prunes every done
row left and reports how many (``SweepResult.pruned``).  It deletes them, so each test looks
once, at its end.  Which jobs are left is read with ``Queue.job_info`` (done and cancelled)
and ``Queue.dlq_list`` / ``dlq_size`` (dead).
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from blamequeue import Queue, QueueError

from .fixtures import BACKEND, SAFETY_NET, Conformance, succeed
from .running import dead_job, done_job

__all__ = ["TestRetention", "TestRetentionOptions", "TestWithoutRetentionLimits"]


async def _done_rows_left(queue: Queue, now: float) -> int:
    backend = queue._runtimes[BACKEND].backend  # no public way to see a done job everywhere
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


async def _kept(queue: Queue, job_ids: list[str]) -> list[str]:
    """Which of ``job_ids`` are still stored (``Queue.job_info``), in that order."""
    return [job_id for job_id in job_ids if await queue.job_info(job_id) is not None]


async def _dead_ids(queue: Queue, name: str) -> list[str]:
    """The ids of ``name``'s dead jobs, most recently failed first; ``dlq_size`` agrees."""
    ids = [letter.job_id for letter in await queue.dlq_list(name)]
    assert await queue.dlq_size(name) == len(ids)
    return ids


async def _dead_jobs_one_second_apart(
    conformance: Conformance, queue: Queue, name: str
) -> list[str]:
    ids = []
    for n in range(3):
        ids.append(await dead_job(queue, name, f"dead-{n}"))
        conformance.advance(1)
    return ids


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

    # -- retain_done_count -------------------------------------------------------------------
    async def test_done_count_keeps_the_most_recently_finished_of_each_queue(
        self, conformance: Conformance
    ) -> None:
        conformance.require("retention_limits", "retain_done_count is refused")
        conformance.require_retained_done_jobs()
        conformance.require("inspection", "which jobs are left is looked up by id")
        conformance.require_virtual_time("the first job is delayed so that it finishes last")
        name, other = conformance.name, f"{conformance.name}-other"
        async with conformance.factory.open(retain_done_count=2) as q:
            late = await q.enqueue(name, "enqueued first, finished last", delay=10)
            early = await done_job(q, name, "finished first")
            conformance.advance(1)
            middle = await done_job(q, name, "finished second")
            others = [await done_job(q, other, n) for n in range(2)]
            conformance.advance(10)
            assert (await q.tick(name, succeed)).succeeded == 1  # `late`
            await q.sweep()
            assert await _kept(q, [late, early, middle]) == [late, middle]
            assert await _kept(q, others) == others  # another queue keeps its own two

    async def test_done_count_applies_along_with_retain_done(
        self, conformance: Conformance
    ) -> None:
        conformance.require("retention_limits", "retain_done_count is refused")
        conformance.require_retained_done_jobs()
        conformance.require("inspection", "which jobs are left is looked up by id")
        async with conformance.factory.open(retain_done=5, retain_done_count=10) as q:
            first = await done_job(q, conformance.name)
            conformance.advance(3)
            second = await done_job(q, conformance.name)
            conformance.advance(2.5)
            await q.sweep()
            assert await _kept(q, [first, second]) == [second]  # first is older than 5 s

    async def test_done_count_zero_keeps_no_done_job(self, conformance: Conformance) -> None:
        conformance.require("retention_limits", "retain_done_count is refused")
        async with conformance.factory.open(retain_done_count=0) as q:
            await done_job(q, conformance.name)
            assert await _done_rows_left(q, conformance.now()) == 0

    async def test_cancelled_jobs_count_with_the_done_jobs_of_their_queue(
        self, conformance: Conformance
    ) -> None:
        conformance.require("retention_limits", "retain_done_count is refused")
        conformance.require_retained_done_jobs()
        conformance.require("cancel", "jobs are cancelled")
        conformance.require("inspection", "which jobs are left is looked up by id")
        name = conformance.name
        async with conformance.factory.open(retain_done_count=2) as q:
            done = await done_job(q, name)
            conformance.advance(1)
            cancelled = await q.enqueue(name, "cancelled")
            assert await q.cancel(cancelled) is True
            conformance.advance(1)
            last = await done_job(q, name)
            await q.sweep()
            assert await _kept(q, [done, cancelled, last]) == [cancelled, last]
            conformance.advance(1)
            newest = await done_job(q, name)
            await q.sweep()
            assert await _kept(q, [cancelled, last, newest]) == [last, newest]

    async def test_cancelled_job_is_pruned_by_done_count_zero(
        self, conformance: Conformance
    ) -> None:
        conformance.require("retention_limits", "retain_done_count is refused")
        conformance.require("cancel", "jobs are cancelled")
        conformance.require("inspection", "whether the job is left is looked up by id")
        async with conformance.factory.open(retain_done_count=0) as q:
            job_id = await q.enqueue(conformance.name, "x")
            assert await q.cancel(job_id) is True
            await q.sweep()
            assert await q.job_info(job_id) is None

    # -- retain_dead -------------------------------------------------------------------------
    async def test_dead_job_is_kept_until_retain_dead_has_passed(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "dead jobs are listed")
        conformance.require("retention_limits", "dead jobs are pruned by age")
        name = conformance.name
        async with conformance.factory.open(retain_dead=60) as q:
            job_id = await dead_job(q, name)
            died_at = conformance.now()
            conformance.advance_to(died_at + 59.999)
            await q.sweep()
            assert await _dead_ids(q, name) == [job_id]
            conformance.advance_to(died_at + 60.001)
            await q.sweep()
            assert await _dead_ids(q, name) == []

    async def test_retain_dead_prunes_only_the_old_dead_jobs(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "dead jobs are listed")
        conformance.require("retention_limits", "dead jobs are pruned by age")
        name = conformance.name
        async with conformance.factory.open(retain_dead=1.5) as q:
            ids = await _dead_jobs_one_second_apart(conformance, q, name)
            await q.sweep()  # now = third + 1: the first died 3 s ago, the second 2 s ago
            assert await _dead_ids(q, name) == [ids[2]]
            if conformance.capabilities.inspection:
                assert await q.job_info(ids[0]) is None

    async def test_retain_dead_zero_prunes_every_dead_job_at_the_next_sweep(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "dead jobs are listed")
        conformance.require("retention_limits", "dead jobs are pruned")
        async with conformance.factory.open(retain_dead=0) as q:
            await dead_job(q, conformance.name)
            await q.sweep()
            assert await _dead_ids(q, conformance.name) == []

    async def test_the_sweep_timer_retention_limits_jobs(self, conformance: Conformance) -> None:
        conformance.require("dlq", "dead jobs are listed")
        conformance.require("retention_limits", "dead jobs are pruned by age")
        name = conformance.name
        async with conformance.factory.open(sweep_interval=5, retain_dead=30) as q:
            await dead_job(q, name)
            conformance.advance(36)  # no sweep() call: the timer does it
            with anyio.fail_after(SAFETY_NET):
                for _ in range(int(SAFETY_NET * 1000)):  # until the timer's sweep has run
                    if not await q.dlq_size(name):
                        break
                    await anyio.sleep(0.001)
            assert await q.dlq_list(name) == []

    # -- retain_dead_count -------------------------------------------------------------------
    async def test_dead_count_keeps_the_most_recently_failed_of_each_queue(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "dead jobs are listed")
        conformance.require("retention_limits", "dead jobs are pruned by count")
        name, other = conformance.name, f"{conformance.name}-other"
        async with conformance.factory.open(retain_dead_count=2) as q:
            ids = await _dead_jobs_one_second_apart(conformance, q, name)
            kept_elsewhere = await dead_job(q, other)
            await q.sweep()
            assert await _dead_ids(q, name) == [ids[2], ids[1]]
            assert await _dead_ids(q, other) == [kept_elsewhere]
            if conformance.capabilities.inspection:
                assert await q.job_info(ids[0]) is None

    async def test_dead_count_zero_keeps_no_dead_job(self, conformance: Conformance) -> None:
        conformance.require("dlq", "dead jobs are listed")
        conformance.require("retention_limits", "dead jobs are pruned by count")
        async with conformance.factory.open(retain_dead_count=0) as q:
            await dead_job(q, conformance.name)
            await q.sweep()
            assert await _dead_ids(q, conformance.name) == []

    async def test_a_retried_dead_job_is_no_longer_counted(self, conformance: Conformance) -> None:
        conformance.require("dlq", "dead jobs are retried")
        conformance.require("retention_limits", "dead jobs are pruned by count")
        name = conformance.name
        async with conformance.factory.open(retain_dead_count=1) as q:
            first = await dead_job(q, name)
            conformance.advance(1)
            second = await dead_job(q, name)
            assert await q.dlq_retry(first)
            await q.sweep()
            assert await _dead_ids(q, name) == [second]
            assert await q.size(name) == 1  # the retried job is pending, untouched


_BAD_VALUES: list[tuple[str, Any]] = [
    ("retain_dead", -1),
    ("retain_dead", math.nan),
    ("retain_dead", math.inf),
    ("retain_dead", "60"),
    ("retain_done_count", -1),
    ("retain_done_count", 1.5),
    ("retain_done_count", math.nan),
    ("retain_done_count", "10"),
    ("retain_done_count", True),
    ("retain_dead_count", -3),
    ("retain_dead_count", 2.5),
    ("retain_dead_count", math.nan),
]


@pytest.mark.anyio
class TestRetentionOptions:
    @pytest.mark.parametrize(("option", "value"), _BAD_VALUES)
    async def test_a_bad_retention_value_is_refused_at_construction(
        self, conformance: Conformance, option: str, value: Any
    ) -> None:
        with pytest.raises(QueueError) as info:
            conformance.factory.build(**{option: value})  # nothing is opened
        assert info.value.code == "queue/invalid-config"
        assert option in info.value.message

    async def test_every_retention_option_is_accepted(self, conformance: Conformance) -> None:
        conformance.require("retention_limits", "the retention limits are refused")
        options = {"retain_dead": 86400, "retain_done_count": 1000, "retain_dead_count": 50}
        async with conformance.factory.open(**options) as q:
            assert await q.sweep() == 0


@pytest.mark.anyio
class TestWithoutRetentionLimits:
    """A backend without the ``RetentionLimits`` facet (its dead jobs stay until retried or
    purged) refuses ``retain_dead`` and the ``retain_*_count`` limits when the queue is built,
    saying what to do instead."""

    @pytest.mark.parametrize("option", ["retain_dead", "retain_done_count", "retain_dead_count"])
    async def test_retention_limits_are_refused(
        self, conformance: Conformance, option: str
    ) -> None:
        if conformance.capabilities.retention_limits:
            pytest.skip("backend has RetentionLimits")
        with pytest.raises(QueueError) as info:
            conformance.factory.build(**{option: 10})
        assert info.value.code == "queue/retention-unsupported"
        assert option in info.value.message
        assert "remove them" in info.value.message
