"""SPEC §11 unique jobs: ``enqueue(..., unique_key=..., unique_for=...)``.

While the job that took a key is pending (delayed included) or inflight, an enqueue on the same
queue with the same key stores nothing and returns that job's id; the key is free once the job
leaves those states or ``unique_for`` has passed, whichever comes first.  Backends without the
``unique`` capability refuse the key (``queue/unique-unsupported``) and store nothing.
"""

from __future__ import annotations

import math
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from blamequeue import Job, JobContext, Queue

from .fixtures import Conformance, fail, succeed
from .refusals import refused
from .requirements import lacking, requires
from .running import dead_job, lease_order

__all__ = ["TestUniqueArguments", "TestUniqueJobs", "TestWithoutUniqueJobs"]

_KEY = "reindex:user-42"
_CONCURRENT = 24


async def _dead_with_the_key(conformance: Conformance) -> str:
    """A job ``"doomed"`` holding the unique key, failed into the dead-letter queue; its id."""
    conformance.require("dlq", "there is no dead-letter queue to retry from")
    return await dead_job(conformance.queue, conformance.name, "doomed", unique_key=_KEY)


async def _takes_the_key(
    conformance: Conformance, payload: object, *, unique_for: float
) -> tuple[str, float]:
    """Enqueue ``payload`` holding the unique key for ``unique_for`` seconds; its id and when
    the key is free again."""
    free_at = conformance.now() + unique_for
    job_id = await conformance.queue.enqueue(
        conformance.name, payload, unique_key=_KEY, unique_for=unique_for
    )
    return job_id, free_at


async def _shared_queues(
    conformance: Conformance, stack: AsyncExitStack, count: int
) -> list[Queue]:
    """``count`` more started queues on the store under test (each with a connection of its
    own), when queues built from its config share one store; else none."""
    queues = [await stack.enter_async_context(conformance.factory.open()) for _ in range(count)]
    return queues if await conformance.shares_store(queues[0], conformance.queue) else []


@requires("unique", "the backend cannot deduplicate jobs by unique key")
class TestUniqueJobs:
    async def test_duplicate_of_a_pending_job_returns_its_id_and_stores_nothing(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "first", unique_key=_KEY)
        again = await q.enqueue(name, "second", unique_key=_KEY, priority=0)
        assert again == first
        assert await q.size(name) == 1
        assert await lease_order(conformance, max=1000) == ["first"]

    async def test_duplicate_of_a_delayed_job_returns_its_id(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "no job can be delayed")
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "later", unique_key=_KEY, delay=3600)
        assert await q.enqueue(name, "now", unique_key=_KEY) == first
        assert await q.size(name) == 1

    async def test_duplicate_of_an_inflight_job_returns_its_id(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "running", unique_key=_KEY)
        during: list[str] = []

        async def enqueue_again(job: Job, ctx: JobContext) -> None:
            during.append(await q.enqueue(name, "duplicate", unique_key=_KEY))

        result = await q.tick(name, enqueue_again)
        assert result.succeeded == 1
        assert during == [first]
        assert await q.size(name) == 0

    async def test_a_job_waiting_to_retry_keeps_its_key(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "flaky", unique_key=_KEY, max_attempts=2)
        assert (await q.tick(name, fail)).failed == 1
        assert await q.size(name) == 1  # pending again, waiting for its backoff
        assert await q.enqueue(name, "duplicate", unique_key=_KEY) == first

    async def test_the_key_is_free_once_the_job_is_done_dead_or_purged(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        ids = [await q.enqueue(name, "done", unique_key=_KEY, max_attempts=1)]
        assert (await q.tick(name, succeed)).succeeded == 1
        ids.append(await q.enqueue(name, "dead", unique_key=_KEY, max_attempts=1))
        assert (await q.tick(name, fail)).failed == 1
        ids.append(await q.enqueue(name, "purged", unique_key=_KEY))
        assert await q.purge(name) == 1
        ids.append(await q.enqueue(name, "fresh", unique_key=_KEY))
        assert len(set(ids)) == 4
        assert await lease_order(conformance, max=1000) == ["fresh"]

    async def test_the_key_is_free_once_unique_for_has_passed(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first, free_at = await _takes_the_key(conformance, "first", unique_for=60)
        conformance.advance_to(free_at - 0.001)
        assert await q.enqueue(name, "early", unique_key=_KEY) == first
        conformance.advance_to(free_at)
        second = await q.enqueue(name, "second", unique_key=_KEY, unique_for=60)
        assert second != first
        assert await q.size(name) == 2  # the first job is not touched, only its key
        assert await q.enqueue(name, "third", unique_key=_KEY) == second

    async def test_the_first_job_finishing_after_unique_for_leaves_the_new_holder_its_key(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first, free_at = await _takes_the_key(conformance, "first", unique_for=10)
        conformance.advance_to(free_at)
        second = await q.enqueue(name, "second", unique_key=_KEY)
        ran: list[str] = []

        async def record(job: Job, ctx: JobContext) -> None:
            ran.append(job.id)

        await q.tick(name, record, max=1)
        assert ran == [first]
        assert await q.enqueue(name, "third", unique_key=_KEY) == second

    async def test_without_unique_for_the_key_is_held_however_long_the_job_waits(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "no job can wait that long")
        conformance.require_virtual_time("the job's delay is measured on the virtual clock")
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "slow", unique_key=_KEY, delay=30 * 86400)
        conformance.advance(30 * 86400 - 1)
        assert await q.enqueue(name, "again", unique_key=_KEY) == first

    async def test_keys_are_per_queue_and_other_keys_make_other_jobs(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        here = await q.enqueue(name, "here", unique_key=_KEY)
        there = await q.enqueue(f"{name}-other", "there", unique_key=_KEY)
        other = await q.enqueue(name, "other key", unique_key=f"{_KEY}-b")
        plain = await q.enqueue(name, "no key")
        assert len({here, there, other, plain}) == 4
        assert await q.size(name) == 3
        assert await q.size(f"{name}-other") == 1

    async def test_concurrent_enqueues_store_one_job_and_all_get_its_id(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        ids: list[str] = []

        async def produce(producer: Queue, n: int) -> None:
            ids.append(await producer.enqueue(name, {"n": n}, unique_key=_KEY))

        async with AsyncExitStack() as stack:
            producers = [q, *await _shared_queues(conformance, stack, 2)]
            async with anyio.create_task_group() as tg:
                for n in range(_CONCURRENT):
                    tg.start_soon(produce, producers[n % len(producers)], n)
        assert len(ids) == _CONCURRENT
        assert len(set(ids)) == 1
        assert await q.size(name) == 1

    async def test_dlq_retry_brings_the_job_back_without_its_key(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await _dead_with_the_key(conformance)
        assert await q.dlq_retry(first)
        second = await q.enqueue(name, "fresh", unique_key=_KEY)
        assert second != first
        assert await q.size(name) == 2

    async def test_dlq_retry_after_another_job_took_the_key_runs_both(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await _dead_with_the_key(conformance)
        second = await q.enqueue(name, "fresh", unique_key=_KEY)
        assert await q.dlq_retry(first)
        assert await q.enqueue(name, "again", unique_key=_KEY) == second
        assert sorted(await lease_order(conformance, max=1000)) == ["doomed", "fresh"]

    async def test_a_deduplicated_enqueue_is_audited_with_the_job_it_returned(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        first = await q.enqueue(name, "first", unique_key=_KEY, trace_id="trace-1")
        assert conformance.audit.named("system.queue.enqueue.deduplicated") == []
        await q.enqueue(name, "second", unique_key=_KEY, trace_id="trace-2", classification="c")
        [event] = conformance.audit.named("system.queue.enqueue.deduplicated")
        assert (event.queue, event.job_id) == (name, first)
        assert (event.trace_id, event.classification) == ("trace-2", "c")
        digest = event.data["unique_key_digest"]
        assert isinstance(digest, str)
        assert _KEY not in digest


@lacking("unique", "TestUniqueJobs covers it")
class TestWithoutUniqueJobs:
    async def test_a_unique_key_is_refused_and_nothing_is_stored(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        info = await refused("queue/unique-unsupported", q.enqueue(name, "x", unique_key=_KEY))
        assert "unique" in info.message
        assert await q.size(name) == 0


@pytest.mark.anyio
class TestUniqueArguments:
    async def test_bad_unique_arguments_are_refused_before_anything_is_stored(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        bad: list[tuple[Any, Any, str]] = [
            *((key, None, "unique_key") for key in ("", "   ", 42, b"bytes", "k" * 257)),
            *((_KEY, s, "unique_for") for s in (0, -1, math.nan, math.inf, 1e12, True, "60")),
            (None, 60, "unique_key"),  # unique_for alone
        ]
        for key, seconds, named in bad:
            info = await refused(
                "queue/bad-argument",
                q.enqueue(name, "x", unique_key=key, unique_for=seconds),
                case=(key, seconds),
            )
            assert named in info.message
        assert await q.size(name) == 0

    async def test_enqueue_many_refuses_a_unique_key_and_points_to_enqueue(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        info = await refused(
            "queue/bad-argument", q.enqueue_many(name, ["a", "b"], unique_key=_KEY)
        )
        assert "enqueue(" in info.message
        assert await q.size(name) == 0
