"""SPEC §11 fleet-wide limits: ``group_key`` with ``group_concurrency`` and a
``global_rate_limit`` shared by every consumer and tick of a queue.

Ticks make these deterministic: a tick's batch is one lease, and a handler that runs a second
tick holds its own job in flight meanwhile (as a worker elsewhere would).  The rate bucket is
refilled only by the virtual clock, so "how many may start now" is exact.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from blamequeue import Job, JobContext, Queue, QueueError, RateLimit

from .fixtures import Conformance, succeed, wait_until
from .refusals import refused
from .requirements import requires
from .running import consuming, lease_order, starts_two_at_a_time

__all__ = [
    "TestGlobalRateLimit",
    "TestGroupConcurrency",
    "TestLimitArguments",
    "TestWithoutLimits",
]

_Call = Callable[[Queue, str], Awaitable[object]]

_CALLS_NEEDING: dict[str, dict[str, _Call]] = {
    "group_limits": {
        "enqueue with a group_key": lambda q, n: q.enqueue(n, None, group_key="tenant"),
        "tick with group_concurrency": lambda q, n: q.tick(n, succeed, group_concurrency=1),
    },
    "global_rate_limit": {
        "consume with a global_rate_limit": lambda q, n: q.consume(
            n, succeed, global_rate_limit=RateLimit(max=1, per_seconds=1)
        ),
    },
}
"""Per capability, the calls a backend without it refuses with ``queue/limits-unsupported``."""


@requires("group_limits", "group_key and group_concurrency are refused")
class TestGroupConcurrency:
    async def test_a_group_at_its_limit_is_skipped_for_the_next_eligible_job(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a1", "a2", "a3"], group_key="tenant-a")
        await q.enqueue(name, "b1", group_key="tenant-b")
        await q.enqueue(name, "free")
        # The saturated group at the head does not hold back the jobs behind it.
        assert await lease_order(conformance, group_concurrency=1) == ["a1", "b1", "free"]
        assert await lease_order(conformance, group_concurrency=1) == ["a2"]
        assert await lease_order(conformance, group_concurrency=1) == ["a3"]

    async def test_group_concurrency_n_lets_n_jobs_of_a_group_run(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(5)), group_key="g")
        assert await lease_order(conformance, group_concurrency=2) == [0, 1]
        assert await lease_order(conformance, group_concurrency=3) == [2, 3, 4]

    async def test_jobs_in_flight_elsewhere_count_towards_their_group(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a1", "a2"], group_key="a")
        await q.enqueue(name, "b1", group_key="b")
        inner: list[Any] = []

        async def hold_a1(job: Job, ctx: JobContext) -> None:
            # a1 is in flight while this second worker leases.
            inner.extend(await lease_order(conformance, group_concurrency=1))

        outer = await q.tick(name, hold_a1, max=1, group_concurrency=1)
        assert outer.succeeded == 1
        assert inner == ["b1"]
        assert await lease_order(conformance, group_concurrency=1) == ["a2"]

    async def test_a_settled_job_frees_its_group_slot(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("the retried job waits out its backoff")
        conformance.require_default("backoff")
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a1", "a2"], group_key="a", max_attempts=3)

        async def fail_once(job: Job, ctx: JobContext) -> None:
            if job.payload == "a1" and job.attempts == 1:
                raise RuntimeError("first attempt fails")

        result = await q.tick(name, fail_once, max=10, group_concurrency=1)
        assert (result.leased, result.failed) == (1, 1)
        # a1 waits out its backoff as pending: the group has no job in flight, a2 may run.
        assert await lease_order(conformance, group_concurrency=1) == ["a2"]
        conformance.advance(1)
        assert await lease_order(conformance, group_concurrency=1) == ["a1"]

    async def test_jobs_without_a_group_are_not_limited(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(4)))
        assert await lease_order(conformance, group_concurrency=1) == [0, 1, 2, 3]

    async def test_without_group_concurrency_groups_are_not_limited(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2, 3], group_key="g")
        assert await lease_order(conformance) == [1, 2, 3]

    async def test_priority_order_holds_among_eligible_jobs(self, conformance: Conformance) -> None:
        conformance.require("priority", "priorities cannot be checked")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "a-low", group_key="a")
        await q.enqueue(name, "a-high", group_key="a", priority=5)
        await q.enqueue(name, "b-mid", group_key="b", priority=3)
        assert await lease_order(conformance, group_concurrency=1) == ["a-high", "b-mid"]

    async def test_the_handler_sees_the_group_key(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, None, group_key="tenant-7")
        await q.enqueue(name, None)
        keys: list[str | None] = []

        async def record(job: Job, ctx: JobContext) -> None:
            keys.append(job.group_key)

        await q.tick(name, record, max=10)
        assert keys == ["tenant-7", None]

    async def test_a_consumer_runs_one_job_of_a_group_at_a_time(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(4)), group_key="g")
        await q.enqueue_many(name, ["x"], group_key="h")
        running: dict[str | None, int] = {}
        peak: dict[str | None, int] = {}
        done = 0

        async def track(job: Job, ctx: JobContext) -> None:
            nonlocal done
            running[job.group_key] = running.get(job.group_key, 0) + 1
            peak[job.group_key] = max(peak.get(job.group_key, 0), running[job.group_key])
            await anyio.sleep(0.01)
            running[job.group_key] -= 1
            done += 1

        async with consuming(
            q, name, track, concurrency=4, poll_interval=0.01, fast_poll=0.0, group_concurrency=1
        ):
            await wait_until(lambda: done == 5, "every job to run")
        assert peak == {"g": 1, "h": 1}


@requires("global_rate_limit", "global_rate_limit is refused")
class TestGlobalRateLimit:
    async def test_a_full_bucket_allows_a_burst_of_max(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(10)))
        rate = RateLimit(max=3, per_seconds=10)
        assert await lease_order(conformance, global_rate_limit=rate) == [0, 1, 2]
        assert await lease_order(conformance, global_rate_limit=rate) == []

    async def test_tokens_come_back_at_the_rate_on_the_queue_clock(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(10)))
        rate = {"max": 2, "per_seconds": 10}  # one token every 5 s
        assert len(await lease_order(conformance, global_rate_limit=rate)) == 2
        conformance.advance(4.9)
        assert await lease_order(conformance, global_rate_limit=rate) == []
        conformance.advance(0.1)
        assert await lease_order(conformance, global_rate_limit=rate) == [2]
        # An idle queue saves up at most `max` tokens.
        conformance.advance(3600)
        assert await lease_order(conformance, global_rate_limit=rate) == [3, 4]

    async def test_the_bucket_is_shared_by_every_worker_of_the_queue(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, list(range(10)))
        rate = RateLimit(max=3, per_seconds=10)
        async with conformance.factory.open() as other:
            await conformance.require_shared_store(q, other)
            assert await lease_order(conformance, global_rate_limit=rate) == [0, 1, 2]
            result = await other.tick(name, succeed, max=10, global_rate_limit=rate)
            assert result.leased == 0

    async def test_the_bucket_belongs_to_one_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        other = f"{name}-other"
        await q.enqueue_many(name, [1, 2])
        await q.enqueue_many(other, [1, 2])
        rate = RateLimit(max=2, per_seconds=60)
        assert len(await lease_order(conformance, global_rate_limit=rate)) == 2
        result = await q.tick(other, succeed, max=10, global_rate_limit=rate)
        assert result.leased == 2

    async def test_rate_and_group_limits_combine(self, conformance: Conformance) -> None:
        conformance.require("group_limits", "group_key is refused")
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, ["a1", "a2"], group_key="a")
        await q.enqueue_many(name, ["b1", "b2"], group_key="b")
        await q.enqueue(name, "free")
        limits: dict[str, Any] = {
            "global_rate_limit": RateLimit(max=2, per_seconds=10),
            "group_concurrency": 1,
        }
        assert await lease_order(conformance, **limits) == ["a1", "b1"]
        conformance.advance(5)
        assert await lease_order(conformance, **limits) == ["a2"]

    async def test_a_consumer_starts_no_more_than_the_fleet_rate(
        self, conformance: Conformance
    ) -> None:
        starts = await starts_two_at_a_time(conformance, "global_rate_limit", advances=[10, 5])
        assert starts == [0, 0, 10, 10, 15]


@pytest.mark.anyio
class TestLimitArguments:
    @pytest.mark.parametrize("group_key", ["", 7, b"tenant", "x" * 257])
    async def test_a_bad_group_key_is_refused_and_nothing_stored(
        self, conformance: Conformance, group_key: Any
    ) -> None:
        q, name = conformance.queue, conformance.name
        info = await refused("queue/bad-argument", q.enqueue(name, None, group_key=group_key))
        assert "group_key" in info.message
        with pytest.raises(QueueError):
            await q.enqueue_many(name, [1, 2], group_key=group_key)
        assert await conformance.size() == 0

    @pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
    async def test_group_concurrency_must_be_a_positive_int(
        self, conformance: Conformance, value: Any
    ) -> None:
        q, name = conformance.queue, conformance.name
        for call in (
            lambda: q.consume(name, succeed, group_concurrency=value),
            lambda: q.tick(name, succeed, group_concurrency=value),
        ):
            info = await refused("queue/bad-argument", call())
            assert "group_concurrency" in info.message

    @pytest.mark.parametrize(
        "value", ["100/s", 5, {"max": 0, "per_seconds": 1}, {"max": 1, "per_seconds": -1}, {}]
    )
    async def test_global_rate_limit_takes_what_rate_limit_takes(
        self, conformance: Conformance, value: Any
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, None)
        info = await refused("queue/bad-argument", q.tick(name, succeed, global_rate_limit=value))
        assert "RateLimit" in info.message or "global_rate_limit" in info.message
        assert await conformance.size() == 1  # nothing was leased


@pytest.mark.anyio
class TestWithoutLimits:
    @pytest.mark.parametrize("capability", list(_CALLS_NEEDING))
    async def test_a_limit_the_backend_cannot_enforce_is_refused(
        self, conformance: Conformance, capability: str
    ) -> None:
        if getattr(conformance.capabilities, capability):
            pytest.skip(f"backend declares {capability}=True")
        for what, call in _CALLS_NEEDING[capability].items():
            await refused(
                "queue/limits-unsupported", call(conformance.queue, conformance.name), case=what
            )
