"""SPEC §15: ``enqueue(..., job_id="order-42")``, ids chosen by the caller.

Enqueueing an id the backend already holds, in any state still stored, returns it and stores
nothing (idempotent producers): no second job, no ``job.added`` event, the stored job's payload
untouched.  Backends whose capabilities exclude ``job_ids`` refuse with
``queue/job-ids-unsupported``; a malformed id is ``queue/bad-argument`` everywhere, before
anything is stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from blamequeue import Job, JobContext, Queue, QueueEvent

from .fixtures import Conformance
from .flows import fetch_then_parse
from .refusals import refused
from .requirements import lacking, requires
from .running import dead_job, done_job, lease_order

__all__ = ["TestJobIdArguments", "TestJobIds", "TestWithoutJobIds"]

_CONCURRENT = 24
_DEDUPLICATED = "system.queue.enqueue.deduplicated"

#: Ids outside the alphabet (1 to 128 ASCII letters, digits and ``-_.:@``), or not strings.
BAD_IDS: tuple[Any, ...] = (
    "",
    "x" * 129,
    "order 42",
    " order-42",
    "order-42\n",
    "{order}-42",
    "order/42",
    "order%42",
    "order#42",
    "ordér-42",
    "order\x00",
    42,
    b"order-42",
    True,
    ["order-42"],
)


def _chosen(label: str = "order") -> str:
    """An id no other test uses (a store may be shared between tests)."""
    return f"{label}-{uuid.uuid4().hex[:16]}"


async def _state(conformance: Conformance, job_id: str) -> str | None:
    if not conformance.capabilities.inspection:
        return None
    info = await conformance.queue.job_info(job_id)
    return None if info is None else info.state


async def _enqueued_again_changes_nothing(
    conformance: Conformance, job_id: str, *, queue_name: str | None = None
) -> None:
    """Enqueueing ``job_id`` again returns it, keeps the queue's size and the job's state."""
    q = conformance.queue
    name = queue_name or conformance.name
    before = (await q.size(name), await _state(conformance, job_id))
    assert await q.enqueue(name, "second", job_id=job_id) == job_id
    assert (await q.size(name), await _state(conformance, job_id)) == before


@requires("job_ids", "the backend cannot store a job under an id the caller chose")
class TestJobIds:
    async def test_enqueue_returns_the_chosen_id_and_the_job_runs_under_it(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        assert await q.enqueue(name, "first", job_id=chosen) == chosen
        seen: list[tuple[str, Any]] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append((job.id, job.payload))

        await q.tick(name, record)
        assert seen == [(chosen, "first")]

    async def test_the_longest_id_and_every_allowed_character_are_accepted(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        alphabet = "azAZ09-_.:@"
        for chosen in (alphabet + uuid.uuid4().hex, uuid.uuid4().hex * 4):
            assert len(chosen) <= 128
            assert await q.enqueue(name, chosen, job_id=chosen) == chosen
        assert await conformance.size() == 2

    async def test_a_pending_id_enqueued_again_returns_it_and_stores_nothing(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        await q.enqueue(name, "first", job_id=chosen)
        assert await q.enqueue(name, "second", job_id=chosen, priority=0) == chosen
        assert await conformance.size() == 1
        assert await lease_order(conformance) == ["first"]  # the payload was not overwritten

    async def test_a_delayed_id_enqueued_again_stays_delayed(
        self, conformance: Conformance
    ) -> None:
        conformance.require("delay", "a delayed job is needed")
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        await q.enqueue(name, "first", job_id=chosen, delay=60)
        assert await q.enqueue(name, "second", job_id=chosen) == chosen
        assert await conformance.size() == 1
        assert await conformance.leasable() == 0  # not made due by the second enqueue

    async def test_an_inflight_id_enqueued_again_returns_it_and_stores_nothing(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        await q.enqueue(name, "first", job_id=chosen)
        answers: list[str] = []

        async def enqueue_again(job: Job, ctx: JobContext) -> None:
            answers.append(await q.enqueue(name, "second", job_id=chosen))

        result = await q.tick(name, enqueue_again)
        assert (result.leased, result.succeeded) == (1, 1)
        assert answers == [chosen]
        assert await conformance.size() == 0
        assert await conformance.leasable() == 0

    async def test_a_done_id_enqueued_again_is_not_run_again(
        self, conformance: Conformance
    ) -> None:
        conformance.require_retained_done_jobs()
        conformance.require_default("retain_done")
        q, name = conformance.queue, conformance.name
        chosen = await done_job(q, name, "first", job_id=_chosen())
        await _enqueued_again_changes_nothing(conformance, chosen)
        assert await conformance.leasable() == 0

    async def test_a_dead_id_enqueued_again_stays_in_the_dead_letter_queue(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        chosen = await dead_job(q, name, "first", job_id=_chosen())
        await _enqueued_again_changes_nothing(conformance, chosen)
        assert await conformance.leasable() == 0
        if conformance.capabilities.dlq:
            [dead] = await q.dlq_list(name)
            assert (dead.job_id, dead.payload) == (chosen, "first")

    async def test_a_cancelled_id_enqueued_again_stays_cancelled(
        self, conformance: Conformance
    ) -> None:
        conformance.require("cancel", "a cancelled job is needed")
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        await q.enqueue(name, "first", job_id=chosen)
        assert await q.cancel(chosen) is True
        await _enqueued_again_changes_nothing(conformance, chosen)
        assert await conformance.leasable() == 0

    async def test_a_parked_flow_job_id_enqueued_again_stays_parked(
        self, conformance: Conformance
    ) -> None:
        conformance.require("flows", "a parked flow job is needed")
        q, name = conformance.queue, conformance.name
        flow = await q.enqueue_flow(name, fetch_then_parse())
        parse = flow.jobs[1].job_id
        await _enqueued_again_changes_nothing(conformance, parse)
        assert await lease_order(conformance) == ["fetch"]
        assert await lease_order(conformance) == ["parse"]

    async def test_a_stored_id_raises_no_job_added_event_and_is_audited(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        added: list[str | None] = []

        def record(event: QueueEvent) -> None:
            added.append(event.job_id)

        q.on("job.added", record)
        chosen = _chosen()
        await q.enqueue(name, "first", job_id=chosen, trace_id="trace-1")
        assert conformance.audit.named(_DEDUPLICATED) == []
        await q.enqueue(name, "second", job_id=chosen, trace_id="trace-2")
        assert added == [chosen]
        [event] = conformance.audit.named(_DEDUPLICATED)
        assert (event.queue, event.job_id, event.trace_id) == (name, chosen, "trace-2")
        assert event.data == {"by": "job_id"}

    async def test_an_id_stored_by_another_process_is_not_stored_again(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        async with conformance.factory.open() as other:
            await conformance.require_shared_store(q, other)
            assert await other.enqueue(name, "from the other process", job_id=chosen) == chosen
            assert await q.enqueue(name, "from this one", job_id=chosen) == chosen
            assert await other.size(name) == 1
        assert await lease_order(conformance) == ["from the other process"]

    async def test_concurrent_enqueues_of_one_id_store_one_job(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        chosen = _chosen()
        ids: list[str] = []

        async def produce(producer: Queue, n: int) -> None:
            ids.append(await producer.enqueue(name, n, job_id=chosen))

        async with AsyncExitStack() as stack:
            others = [await stack.enter_async_context(conformance.factory.open()) for _ in "ab"]
            shared = await conformance.shares_store(others[0], q)
            producers = [q, *others] if shared else [q]
            async with anyio.create_task_group() as tg:
                for n in range(_CONCURRENT):
                    tg.start_soon(produce, producers[n % len(producers)], n)
        assert ids == [chosen] * _CONCURRENT
        assert await conformance.size() == 1
        assert len(await lease_order(conformance)) == 1

    async def test_ids_of_other_jobs_are_unaffected(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        first, second = _chosen(), _chosen()
        await q.enqueue(name, "first", job_id=first)
        await q.enqueue(name, "generated")
        await q.enqueue(name, "second", job_id=second)
        await q.enqueue(name, "again", job_id=first)
        assert await lease_order(conformance) == ["first", "generated", "second"]


@lacking("job_ids", "TestJobIds covers it")
class TestWithoutJobIds:
    async def test_a_chosen_id_is_refused_and_nothing_is_stored(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        info = await refused("queue/job-ids-unsupported", q.enqueue(name, "x", job_id=_chosen()))
        assert "job_ids" in info.message
        assert await q.size(name) == 0


@pytest.mark.anyio
class TestJobIdArguments:
    async def test_malformed_ids_are_refused_before_anything_is_stored(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        for bad in BAD_IDS:
            info = await refused("queue/bad-argument", q.enqueue(name, "x", job_id=bad), case=bad)
            assert "job_id" in info.message
        assert await q.size(name) == 0

    async def test_calls_that_cannot_honour_one_chosen_id_refuse_it(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("unique_key", lambda: q.enqueue(name, "x", job_id=_chosen(), unique_key="k")),
            ("enqueue(", lambda: q.enqueue_many(name, ["a", "b"], job_id=_chosen())),
        ]
        for said, call in calls:
            info = await refused("queue/bad-argument", call(), case=said)
            assert said in info.message
        assert await q.size(name) == 0
