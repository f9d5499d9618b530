"""SPEC §3.2 and the ``delay`` option: which due job leases first, and when a job is due."""

from __future__ import annotations

import pytest

from blamequeue import Job, JobContext

from .fixtures import Conformance
from .running import lease_order

__all__ = ["TestDelay", "TestOrdering"]

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


async def _delayed(conformance: Conformance, payload: object, delay: float) -> float:
    """Enqueue ``payload`` on the test's queue with ``delay``; when it is due."""
    due = conformance.now() + delay
    await conformance.queue.enqueue(conformance.name, payload, delay=delay)
    return due


async def _due_exactly_at(conformance: Conformance, due: float) -> None:
    """The test's one job is not leasable a millisecond before ``due``, and is at ``due``."""
    conformance.advance_to(due - 0.001)
    assert await conformance.leasable() == 0
    conformance.advance_to(due)
    assert await conformance.leasable() == 1


@pytest.mark.anyio
class TestOrdering:
    async def test_higher_priority_leases_first(self, conformance: Conformance) -> None:
        conformance.require("priority", "priorities cannot be checked")
        q, name = conformance.queue, conformance.name
        for priority in (0, 5, -3, 10, 1):
            await q.enqueue(name, priority, priority=priority)
        assert await lease_order(conformance) == [10, 5, 1, 0, -3]

    async def test_priority_extremes_of_int32_are_accepted_and_ordered(
        self, conformance: Conformance
    ) -> None:
        conformance.require("priority", "priorities cannot be checked")
        q, name = conformance.queue, conformance.name
        for priority in (0, _INT32_MIN, _INT32_MAX, -1, 1):
            await q.enqueue(name, priority, priority=priority)
        assert await lease_order(conformance) == [_INT32_MAX, 1, 0, -1, _INT32_MIN]

    async def test_equal_priority_leases_in_enqueue_order(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        for n in range(6):
            await q.enqueue(name, n)
        await q.enqueue_many(name, [6, 7, 8])
        assert await lease_order(conformance) == list(range(9))

    async def test_equal_priority_leases_earlier_available_at_first(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "due times cannot be checked")
        conformance.require_virtual_time("due times are reached by moving the clock")
        await _delayed(conformance, "due third", 30)
        await _delayed(conformance, "due second", 20)
        await _delayed(conformance, "due first", 10)
        conformance.advance(60)
        assert await lease_order(conformance) == ["due first", "due second", "due third"]

    async def test_priority_beats_earlier_available_at(self, conformance: Conformance) -> None:
        conformance.require("priority", "priorities cannot be checked")
        conformance.require("delay", "due times cannot be checked")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "low, due long ago", priority=0)
        conformance.advance(100)
        await q.enqueue(name, "high, due just now", priority=1)
        assert await lease_order(conformance) == ["high, due just now", "low, due long ago"]

    async def test_delayed_high_priority_job_is_not_leased_before_due(
        self, conformance: Conformance
    ) -> None:
        conformance.require("priority", "priorities cannot be checked")
        conformance.require("delay", "due times cannot be checked")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "high later", priority=100, delay=10)
        await q.enqueue(name, "low now", priority=-100)
        assert await lease_order(conformance) == ["low now"]
        conformance.advance(10)
        assert await lease_order(conformance) == ["high later"]

    async def test_batch_lease_respects_order_across_ticks(self, conformance: Conformance) -> None:
        conformance.require("priority", "priorities cannot be checked")
        q, name = conformance.queue, conformance.name
        for n in range(10):
            await q.enqueue(name, n, priority=n % 3)
        first = await lease_order(conformance, max=4)
        rest = await lease_order(conformance, max=100)
        expected = sorted(range(10), key=lambda n: (-(n % 3), n))
        assert first + rest == expected


@pytest.mark.anyio
class TestDelay:
    @pytest.mark.parametrize("delay", [10, 0.25], ids=["whole-seconds", "fractional"])
    async def test_delayed_job_is_not_leased_before_its_delay(
        self, conformance: Conformance, delay: float
    ) -> None:
        conformance.require("delay", "delays cannot be checked")
        conformance.require_virtual_time("delays are checked by moving the clock")
        due = await _delayed(conformance, "later", delay)
        assert await conformance.leasable() == 0
        await _due_exactly_at(conformance, due)

    async def test_delayed_job_counts_in_size(self, conformance: Conformance) -> None:
        conformance.require("delay", "delays cannot be checked")
        await conformance.queue.enqueue(conformance.name, "later", delay=3600)
        assert await conformance.size() == 1

    async def test_handler_sees_available_at_of_its_delay(self, conformance: Conformance) -> None:
        conformance.require("delay", "delays cannot be checked")
        conformance.require_virtual_time("the delay is waited out by moving the clock")
        due = await _delayed(conformance, "later", 90.5)
        seen: list[float] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.available_at.timestamp())

        conformance.advance(120)
        await conformance.queue.tick(conformance.name, record)
        assert seen == [pytest.approx(due, abs=1e-3)]

    async def test_zero_delay_is_due_at_once(self, conformance: Conformance) -> None:
        await conformance.queue.enqueue(conformance.name, "now", delay=0)
        assert await conformance.leasable() == 1
