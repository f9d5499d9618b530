"""SPEC §3.1 and §2: the dead-letter queue (exhausted attempts, list, retry, purge)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from blamequeue import DeadLetter, Job, JobContext

from .fixtures import Conformance, fail
from .refusals import refused
from .requirements import lacking, requires
from .running import dead_job, done_job

__all__ = ["TestDeadLetterQueue", "TestWithoutDeadLetterQueue"]


@requires("dlq", "there is no dead-letter queue to check")
class TestDeadLetterQueue:
    async def test_exhausted_attempts_move_job_to_dlq(self, conformance: Conformance) -> None:
        conformance.require_virtual_time("the retry is reached by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x", max_attempts=2)
        first = await q.tick(name, fail)
        assert (first.failed, first.moved_to_dlq) == (1, 0)
        conformance.advance(1)  # the default backoff after one failure
        second = await q.tick(name, fail)
        assert (second.leased, second.failed, second.moved_to_dlq) == (1, 1, 1)
        assert await conformance.size() == 0
        assert await conformance.dlq_size() == 1

    async def test_backend_max_attempts_is_the_default(self, conformance: Conformance) -> None:
        async with conformance.factory.open(max_attempts=1) as q:
            await q.enqueue(conformance.name, "x")
            result = await q.tick(conformance.name, fail)
            assert result.moved_to_dlq == 1
            assert await q.dlq_size(conformance.name) == 1

    async def test_default_max_attempts_is_five(self, conformance: Conformance) -> None:
        conformance.require_default("max_attempts")
        conformance.require_virtual_time("each retry is reached by moving the clock")
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        seen: list[int] = []

        async def boom(job: Job, ctx: JobContext) -> None:
            seen.append(job.max_attempts)
            raise RuntimeError("boom")

        moved = 0
        for _ in range(5):
            moved += (await q.tick(name, boom)).moved_to_dlq
            conformance.advance(300)
        assert seen == [5] * 5
        assert moved == 1
        assert await conformance.dlq_size() == 1

    async def test_dead_letter_records_the_job_and_its_last_error(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_time("the retry is reached by moving the clock")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name,
            {"order": 42},
            max_attempts=2,
            classification="restricted",
            trace_id="trace-dead",
        )

        async def boom(job: Job, ctx: JobContext) -> None:
            raise ValueError(f"card declined on attempt {job.attempts}")

        await q.tick(name, boom)
        conformance.advance(1)
        failed_at = conformance.now()
        await q.tick(name, boom)
        [letter] = await q.dlq_list(name)
        assert isinstance(letter, DeadLetter)
        assert letter.job_id == job_id
        assert letter.queue == name
        assert letter.payload == {"order": 42}
        assert letter.attempts == 2
        assert letter.last_error is not None
        assert "ValueError: card declined on attempt 2" in letter.last_error
        assert letter.trace_id == "trace-dead"
        assert letter.classification == "restricted"
        assert letter.failed_at == datetime.fromtimestamp(failed_at, UTC)

    async def test_dlq_list_shows_latest_failure_first_and_honours_limit(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await dead_job(q, name, "first")
        conformance.advance(1)
        second = await dead_job(q, name, "second")
        conformance.advance(1)
        third = await dead_job(q, name, "third")
        letters = await q.dlq_list(name)
        assert [letter.job_id for letter in letters] == [third, second, first]
        limited = await q.dlq_list(name, limit=2)
        assert [letter.job_id for letter in limited] == [third, second]

    async def test_dead_job_is_never_retried_automatically(self, conformance: Conformance) -> None:
        await dead_job(conformance.queue, conformance.name)
        for _ in range(3):
            conformance.advance(24 * 3600)
            await conformance.queue.sweep()
            assert await conformance.leasable() == 0
        assert await conformance.dlq_size() == 1
        assert await conformance.size() == 0

    async def test_dlq_retry_resets_attempts_and_makes_job_due(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name, {"again": True})
        assert await q.dlq_retry(job_id) is True
        assert await conformance.dlq_size() == 0
        assert await conformance.size() == 1
        seen: list[tuple[str, object, int]] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.id, job.payload, job.attempts))

        result = await q.tick(name, record)  # due at once: no clock advance
        assert result.succeeded == 1
        assert seen == [(job_id, {"again": True}, 1)]
        assert await conformance.size() == 0

    async def test_dlq_retry_of_unknown_job_returns_false(self, conformance: Conformance) -> None:
        assert await conformance.queue.dlq_retry("job-" + "0" * 26) is False

    async def test_dlq_retry_of_live_job_returns_false(self, conformance: Conformance) -> None:
        job_id = await conformance.queue.enqueue(conformance.name, "alive")
        assert await conformance.queue.dlq_retry(job_id) is False
        assert await conformance.size() == 1
        assert await conformance.leasable() == 1

    async def test_dlq_retry_twice_returns_false_the_second_time(
        self, conformance: Conformance
    ) -> None:
        job_id = await dead_job(conformance.queue, conformance.name)
        assert await conformance.queue.dlq_retry(job_id) is True
        assert await conformance.queue.dlq_retry(job_id) is False
        assert await conformance.size() == 1

    async def test_retried_job_can_die_again(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name)
        await q.dlq_retry(job_id)
        result = await q.tick(name, fail)
        assert result.moved_to_dlq == 1
        [letter] = await q.dlq_list(name)
        assert (letter.job_id, letter.attempts) == (job_id, 1)

    async def test_dlq_retry_all_puts_every_dead_job_of_the_queue_back(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        dead = {await dead_job(q, name, n) for n in range(3)}
        other = await dead_job(q, f"{name}-other")  # another queue's dead job stays dead
        await q.enqueue(name, "alive")
        assert await q.dlq_retry_all(name) == 3
        assert await conformance.dlq_size() == 0
        assert await q.dlq_size(f"{name}-other") == 1
        retried = {event.job_id for event in conformance.audit.named("system.queue.dlq.retry")}
        assert retried == dead
        seen: list[tuple[str, int]] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.id, job.attempts))

        result = await q.tick(name, record, max=10)  # due at once, attempts reset
        assert result.succeeded == 4
        assert dead <= {job_id for job_id, _ in seen}
        assert other not in {job_id for job_id, _ in seen}
        assert [attempts for _, attempts in seen] == [1, 1, 1, 1]
        assert await q.dlq_retry_all(name) == 0  # nothing left to retry

    async def test_dlq_purge_empties_dead_letters_and_returns_count(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await dead_job(q, name)
        await dead_job(q, name)
        await q.enqueue(name, "alive")
        assert await q.dlq_purge(name) == 2
        assert await conformance.dlq_size() == 0
        assert await q.dlq_list(name) == []
        assert await conformance.size() == 1  # live jobs untouched
        assert await q.dlq_purge(name) == 0

    async def test_dlq_size_counts_only_this_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await dead_job(q, name)
        other = f"{name}-other"
        await dead_job(q, other)
        assert await q.dlq_size(name) == 1
        assert await q.dlq_size(other) == 1
        assert await q.dlq_purge(other) == 1
        assert await q.dlq_size(name) == 1

    async def test_dlq_of_unknown_queue_is_empty(self, conformance: Conformance) -> None:
        name = f"{conformance.name}-never-used"
        assert await conformance.queue.dlq_size(name) == 0
        assert await conformance.queue.dlq_list(name) == []
        assert await conformance.queue.dlq_purge(name) == 0

    async def test_succeeded_job_never_reaches_dlq(self, conformance: Conformance) -> None:
        await done_job(conformance.queue, conformance.name, "fine", max_attempts=1)
        assert await conformance.dlq_size() == 0


@lacking("dlq", "covered by TestDeadLetterQueue")
class TestWithoutDeadLetterQueue:
    async def test_dlq_calls_raise_dlq_unsupported(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: q.dlq_size(name),
            lambda: q.dlq_list(name),
            lambda: q.dlq_purge(name),
            lambda: q.dlq_retry("job-" + "0" * 26),
            lambda: q.dlq_retry_all(name),
        ]
        for call in calls:
            await refused("queue/dlq-unsupported", call())
