"""SPEC §15: a handler that raises ``RetryLater(seconds)`` sends its job back to pending for
``seconds`` with the attempt given back; ``RateLimited(seconds)`` does the same and stops every
consumer of that queue on that backend, in every process, from leasing it for ``seconds``; a
backoff may be a function of the attempt and the error, per task or per ``consume``/``tick``.
"""

from __future__ import annotations

import math

import pytest

from blamequeue import Job, JobContext, QueueError, RateLimited, RetryLater

from .fixtures import Conformance, succeed
from .requirements import requires, requires_virtual_time
from .running import Recorder

__all__ = ["TestBackoffFunctions", "TestRateLimited", "TestRetryLater"]


async def _later(job: Job, ctx: JobContext) -> None:
    raise RetryLater(30)


async def _limited(job: Job, ctx: JobContext) -> None:
    raise RateLimited(60)


@requires_virtual_time("RetryLater's due time is checked on the virtual clock")
class TestRetryLater:
    async def test_the_attempt_is_given_back_and_the_job_waits(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, {"order": 7}, max_attempts=1)
        for _ in range(3):
            result = await q.tick(name, _later)
            assert (result.leased, result.deferred, result.failed) == (1, 1, 0)
            conformance.advance(29)
            assert (await q.tick(name, succeed)).leased == 0  # not due yet
            conformance.advance(1)
        record = Recorder()
        result = await q.tick(name, record)
        # One attempt allowed, four runs: the three deferred ones were not counted.
        assert result.succeeded == 1
        [job] = record.jobs
        assert (job.payload, job.attempts) == ({"order": 7}, 1)
        assert await q.size(name) == 0

    async def test_retry_later_raises_retrying_not_failed(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        events: list[str] = []
        q.on_any(lambda event: events.append(event.name))
        await q.enqueue(name, "x")
        await q.tick(name, _later)
        assert "job.retrying" in events
        assert "job.failed" not in events

    @pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, 11 * 365 * 86400])
    async def test_bad_seconds_are_refused(self, seconds: float) -> None:
        with pytest.raises(QueueError) as caught:
            RetryLater(seconds)
        assert caught.value.code == "queue/bad-argument"


@requires("records", "the backend keeps no shared records for a fleet-wide rate limit")
@requires_virtual_time("the rate limit's end is checked on the virtual clock")
class TestRateLimited:
    async def test_every_queue_object_stops_leasing_until_it_ends(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "limited")
        await q.enqueue(name, "waiting")
        assert (await q.tick(name, _limited, max=1)).deferred == 1
        async with conformance.factory.open() as other:  # another worker, same store
            await conformance.require_shared_store(q, other)
            conformance.advance(30)
            assert (await other.tick(name, succeed)).leased == 0
            assert (await q.tick(name, succeed)).leased == 0
            conformance.advance(31)
            assert (await other.tick(name, succeed)).succeeded == 2

    async def test_other_queues_are_not_limited(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "limited")
        await q.enqueue(f"{name}-other", "free")
        await q.tick(name, _limited)
        assert (await q.tick(f"{name}-other", succeed)).succeeded == 1


@requires_virtual_time("the backoff's delay is checked on the virtual clock")
class TestBackoffFunctions:
    async def test_a_tick_backoff_function_sets_the_delay(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        seen: list[tuple[int, str]] = []

        def backoff(attempt: int, error: BaseException) -> float:
            seen.append((attempt, type(error).__name__))
            return 7.0 * attempt

        async def fails(job: Job, ctx: JobContext) -> None:
            raise KeyError("missing row")

        await q.enqueue(name, "x", max_attempts=3)
        assert (await q.tick(name, fails, backoff=backoff)).failed == 1
        conformance.advance(6)
        assert (await q.tick(name, fails, backoff=backoff)).leased == 0
        conformance.advance(1)
        assert (await q.tick(name, fails, backoff=backoff)).failed == 1
        conformance.advance(13)
        assert (await q.tick(name, succeed, backoff=backoff)).leased == 0
        conformance.advance(1)
        assert (await q.tick(name, succeed, backoff=backoff)).succeeded == 1
        assert seen == [(1, "KeyError"), (2, "KeyError")]

    async def test_a_bad_answer_falls_back_to_the_default(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name

        def backoff(attempt: int, error: BaseException) -> float:
            return math.nan

        async def fails(job: Job, ctx: JobContext) -> None:
            raise KeyError("missing row")

        await q.enqueue(name, "x", max_attempts=2)
        assert (await q.tick(name, fails, backoff=backoff)).failed == 1
        conformance.advance(1)  # the default backoff's first delay
        assert (await q.tick(name, succeed)).succeeded == 1
