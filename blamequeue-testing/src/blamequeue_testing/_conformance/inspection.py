"""SPEC §2 inspection: ``get_job`` / ``job_info``, ``list_jobs`` (by state, paged), ``queues``
(counts per state) and ``workers`` (live consumers and their heartbeats).

The tests run on backends that declare ``Capabilities.inspection``; on the others,
:class:`TestWithoutInspection` checks that each call is refused with a clear ``QueueError``
(or answered) and that consumers run without a worker registry.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from blamequeue import (
    FlowChild,
    Job,
    JobContext,
    JobInfo,
    JobPage,
    Queue,
    QueueInfo,
    WorkerInfo,
)
from blamequeue.abc import Inspection, WorkerRecord
from blamequeue.errors import UnsupportedError

from .fixtures import BACKEND, SAFETY_NET, Conformance, succeed, wait_until
from .refusals import refused
from .requirements import lacking, requires
from .running import consuming, dead_job, done_job, stop

__all__ = [
    "TestGetJob",
    "TestListJobs",
    "TestQueueCounts",
    "TestWithoutInspection",
    "TestWorkers",
]

RETAIN = 3600.0
"""``retain_done`` of the tests that look at done jobs (whatever bq_backend_config sets)."""

LIVE_FOR = 15.0
"""Seconds after its last heartbeat a worker stops counting as live (three heartbeats)."""


async def _all_pages(
    queue: Queue, name: str, *, limit: int, state: str | None = None
) -> list[JobPage]:
    pages: list[JobPage] = []
    cursor = None
    while True:
        page = await queue.list_jobs(name, state=state, limit=limit, cursor=cursor)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages
        assert len(pages) <= 100, "list_jobs never returned a last page"


async def _done_dead_and_two_pending(q: Queue, name: str) -> tuple[str, str, list[str]]:
    """A done job, a dead one and two pending ones, in that enqueue order; their ids."""
    done = await done_job(q, name)
    dead = await dead_job(q, name)
    return done, dead, await q.enqueue_many(name, ["p1", "p2"])


@asynccontextmanager
async def _retaining_done_and_dead_jobs(conformance: Conformance, why: str) -> AsyncIterator[Queue]:
    """A queue that keeps done jobs :data:`RETAIN` seconds; the test skips (``why``) on a
    backend without a dead-letter queue or that keeps no done job."""
    conformance.require("dlq", why)
    conformance.require_retained_done_jobs()
    async with conformance.factory.open(retain_done=RETAIN) as queue:
        yield queue


async def _three_dead_jobs(q: Queue, name: str) -> list[str]:
    """Three jobs failed into the dead-letter queue one after the other; their ids."""
    return [await dead_job(q, name, f"dead {n}") for n in range(3)]


def _ids(page: JobPage) -> list[str]:
    return [info.job.id for info in page.jobs]


async def _workers_until(
    queue: Queue, predicate: Callable[[list[WorkerInfo]], bool], what: str
) -> list[WorkerInfo]:
    """Poll ``queue.workers()`` until ``predicate`` holds (a heartbeat runs in another task)."""
    try:
        with anyio.fail_after(SAFETY_NET):
            while True:
                workers = await queue.workers()
                if predicate(workers):
                    return workers
                await anyio.sleep(0.001)
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


@requires("inspection", "the backend cannot be inspected")
class TestGetJob:
    async def test_get_job_returns_the_enqueued_job(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(
            name,
            {"to": "ada"},
            priority=3,
            max_attempts=4,
            trace_id="trace-1",
            classification="internal",
        )
        job = await q.get_job(job_id)
        assert isinstance(job, Job)
        assert (job.id, job.queue, job.payload) == (job_id, name, {"to": "ada"})
        assert (job.priority, job.attempts, job.max_attempts) == (3, 0, 4)
        assert (job.trace_id, job.classification, job.last_error) == (
            "trace-1",
            "internal",
            None,
        )
        assert job.created_at.timestamp() == pytest.approx(conformance.now())

    async def test_get_job_of_an_unknown_id_is_none(self, conformance: Conformance) -> None:
        assert await conformance.queue.get_job("job-00000000000000000000000000") is None
        assert await conformance.queue.job_info("job-00000000000000000000000000") is None

    async def test_get_job_refuses_an_empty_id(self, conformance: Conformance) -> None:
        await refused("queue/bad-argument", conformance.queue.get_job(""))

    async def test_job_info_of_a_new_job_is_pending(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        info = await q.job_info(job_id)
        assert isinstance(info, JobInfo)
        assert (info.state, info.backend, info.job.id) == ("pending", BACKEND, job_id)
        assert info.finished_at is None

    async def test_a_delayed_job_is_pending(self, conformance: Conformance) -> None:
        conformance.require("delay", "the backend cannot delay jobs")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "later", delay=60)
        info = await q.job_info(job_id)
        assert info is not None
        assert info.state == "pending"
        assert info.job.available_at.timestamp() == pytest.approx(conformance.now() + 60)

    async def test_a_running_job_is_inflight_with_its_attempt_counted(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        seen: list[JobInfo | None] = []

        async def look(job: Job, ctx: JobContext) -> None:
            seen.append(await q.job_info(job.id))

        await q.tick(name, look)
        [info] = seen
        assert info is not None
        assert (info.state, info.job.attempts) == ("inflight", 1)
        assert info.job.id == job_id

    async def test_a_completed_job_is_done_while_retained(self, conformance: Conformance) -> None:
        conformance.require_retained_done_jobs()
        async with conformance.factory.open(retain_done=RETAIN) as q:
            job_id = await done_job(q, conformance.name)
            info = await q.job_info(job_id)
        assert info is not None
        assert (info.state, info.job.attempts) == ("done", 1)
        assert info.finished_at is not None
        assert info.finished_at.timestamp() == pytest.approx(conformance.now())

    async def test_a_completed_job_without_retention_is_gone(
        self, conformance: Conformance
    ) -> None:
        async with conformance.factory.open(retain_done=0) as q:
            job_id = await done_job(q, conformance.name)
            assert await q.get_job(job_id) is None

    async def test_a_dead_job_is_dead_with_its_last_error(self, conformance: Conformance) -> None:
        conformance.require("dlq", "there is no dead-letter queue")
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name, "doomed")
        info = await q.job_info(job_id)
        assert info is not None
        assert info.state == "dead"
        assert info.job.last_error is not None
        assert f"conformance failure of {job_id}" in info.job.last_error
        assert info.finished_at is not None

    async def test_a_waiting_flow_child_is_parked_with_its_dependencies(
        self, conformance: Conformance
    ) -> None:
        conformance.require("flows", "the backend cannot park flow children")
        q, name = conformance.queue, conformance.name
        flow = await q.enqueue_flow(
            name, [FlowChild(name="a", payload=1), FlowChild(name="b", depends_on=["a"])]
        )
        a, b = (job.job_id for job in flow.jobs)
        info = await q.job_info(b)
        assert info is not None
        assert (info.state, info.depends_on, info.job.flow_id) == ("parked", (a,), flow.flow_id)

    async def test_get_job_finds_a_job_of_any_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(f"{name}-other", "x")
        job = await q.get_job(job_id)
        assert job is not None
        assert job.queue == f"{name}-other"


@requires("inspection", "the backend cannot be inspected")
class TestListJobs:
    async def test_lists_by_state_then_enqueue_order(self, conformance: Conformance) -> None:
        name = conformance.name
        async with _retaining_done_and_dead_jobs(
            conformance, "the listing mixes dead jobs in"
        ) as q:
            done, dead, (first, second) = await _done_dead_and_two_pending(q, name)
            page = await q.list_jobs(name)
        assert _ids(page) == [first, second, done, dead]
        assert [info.state for info in page.jobs] == ["pending", "pending", "done", "dead"]
        assert page.next_cursor is None

    async def test_inflight_jobs_come_after_pending_ones(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        running, waiting = await q.enqueue_many(name, ["running", "waiting"])
        seen: list[JobPage] = []

        async def look(job: Job, ctx: JobContext) -> None:
            seen.append(await q.list_jobs(name))

        await q.tick(name, look, max=1)
        [page] = seen
        assert [(info.job.id, info.state) for info in page.jobs] == [
            (waiting, "pending"),
            (running, "inflight"),
        ]

    async def test_state_keeps_only_jobs_in_that_state(self, conformance: Conformance) -> None:
        conformance.require("dlq", "there is no dead-letter queue")
        q, name = conformance.queue, conformance.name
        dead = await dead_job(q, name)
        pending = await q.enqueue(name, "pending")
        assert _ids(await q.list_jobs(name, state="dead")) == [dead]
        assert _ids(await q.list_jobs(name, state="pending")) == [pending]
        assert _ids(await q.list_jobs(name, state="inflight")) == []

    async def test_pages_chain_through_every_job_once(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        ids = await q.enqueue_many(name, list(range(7)))
        pages = await _all_pages(q, name, limit=3)
        assert [len(page.jobs) for page in pages] == [3, 3, 1]
        assert [job_id for page in pages for job_id in _ids(page)] == ids
        assert pages[-1].next_cursor is None

    async def test_a_full_last_page_has_no_next_cursor(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        ids = await q.enqueue_many(name, [1, 2, 3, 4])
        pages = await _all_pages(q, name, limit=2)
        assert [_ids(page) for page in pages] == [ids[:2], ids[2:]]

    async def test_pages_cross_from_one_state_to_the_next(self, conformance: Conformance) -> None:
        conformance.require("dlq", "there is no dead-letter queue")
        q, name = conformance.queue, conformance.name
        dead = await _three_dead_jobs(q, name)
        pending = await q.enqueue_many(name, ["p1", "p2", "p3"])
        pages = await _all_pages(q, name, limit=2)
        assert [job_id for page in pages for job_id in _ids(page)] == pending + dead

    async def test_a_cursor_pages_within_a_state_filter(self, conformance: Conformance) -> None:
        conformance.require("dlq", "there is no dead-letter queue")
        q, name = conformance.queue, conformance.name
        dead = await _three_dead_jobs(q, name)
        await q.enqueue_many(name, ["p1", "p2"])
        pages = await _all_pages(q, name, limit=2, state="dead")
        assert [_ids(page) for page in pages] == [dead[:2], dead[2:]]

    async def test_a_page_shows_the_job_payloads(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [{"n": 1}, {"n": 2}])
        page = await q.list_jobs(name)
        assert [info.job.payload for info in page.jobs] == [{"n": 1}, {"n": 2}]
        assert {info.backend for info in page.jobs} == {BACKEND}

    async def test_lists_only_its_queue(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        mine = await q.enqueue(name, "mine")
        await q.enqueue(f"{name}-other", "theirs")
        assert _ids(await q.list_jobs(name)) == [mine]

    async def test_an_unknown_queue_lists_nothing(self, conformance: Conformance) -> None:
        page = await conformance.queue.list_jobs(f"{conformance.name}-never-used")
        assert page == JobPage(jobs=[], next_cursor=None)

    @pytest.mark.parametrize("state", ["waiting", "", "PENDING", 1])
    async def test_an_unknown_state_is_refused(
        self, conformance: Conformance, state: object
    ) -> None:
        await refused(
            "queue/bad-argument",
            conformance.queue.list_jobs(conformance.name, state=state),  # type: ignore[arg-type]
        )

    @pytest.mark.parametrize("limit", [0, -1, 1001, 2.5, True, "10"])
    async def test_a_bad_limit_is_refused(self, conformance: Conformance, limit: object) -> None:
        await refused(
            "queue/bad-argument",
            conformance.queue.list_jobs(conformance.name, limit=limit),  # type: ignore[arg-type]
        )

    @pytest.mark.parametrize("cursor", ["", "not a cursor", "pending:-1", "gone:3", 7])
    async def test_a_cursor_the_backend_did_not_hand_out_is_refused(
        self, conformance: Conformance, cursor: object
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        await refused("queue/bad-argument", q.list_jobs(name, cursor=cursor))  # type: ignore[arg-type]


@requires("inspection", "the backend cannot be inspected")
class TestQueueCounts:
    async def test_counts_each_state_of_the_queue(self, conformance: Conformance) -> None:
        name = conformance.name
        async with _retaining_done_and_dead_jobs(conformance, "there is no dead-letter queue") as q:
            await _done_dead_and_two_pending(q, name)
            found = {info.name: info for info in await q.queues()}
            assert found[name] == QueueInfo(
                name=name, backend=BACKEND, pending=2, inflight=0, parked=0, done=1, dead=1
            )
            assert found[name].size == await q.size(name)

    async def test_counts_inflight_and_parked_jobs(self, conformance: Conformance) -> None:
        conformance.require("flows", "parked jobs come from flows")
        q, name = conformance.queue, conformance.name
        await q.enqueue_flow(name, [FlowChild(name="a"), FlowChild(name="b", depends_on=["a"])])
        seen: list[list[QueueInfo]] = []

        async def look(job: Job, ctx: JobContext) -> None:
            seen.append(await q.queues())

        await q.tick(name, look)
        [during] = seen
        [info] = [info for info in during if info.name == name]
        assert (info.pending, info.inflight, info.parked) == (0, 1, 1)

    async def test_lists_every_queue_holding_jobs_by_name(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(f"{name}-b", "x")
        await q.enqueue(f"{name}-a", "y")
        names = [info.name for info in await q.queues()]
        mine = [n for n in names if n.startswith(name)]
        assert mine == [f"{name}-a", f"{name}-b"]
        assert names == sorted(names)

    async def test_a_purged_queue_is_no_longer_listed(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        await q.purge(name)
        assert name not in {info.name for info in await q.queues()}


@requires("inspection", "the backend cannot be inspected")
class TestWorkers:
    async def test_a_running_consumer_is_listed_with_where_it_runs(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        async with consuming(q, name, succeed, concurrency=3, poll_interval=3600) as consumer:
            [worker] = [w for w in await q.workers() if w.queue == name]
            assert worker.id == consumer.id
            assert (worker.backend, worker.concurrency) == (BACKEND, 3)
            assert (worker.host, worker.pid) == (socket.gethostname(), os.getpid())
            assert worker.started_at.timestamp() == pytest.approx(conformance.now())
            assert worker.last_heartbeat.timestamp() == pytest.approx(conformance.now())

    async def test_a_stopped_consumer_is_no_longer_listed(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        consumer = await q.consume(name, succeed, poll_interval=3600)
        await stop(consumer)
        assert consumer.id not in {w.id for w in await q.workers()}

    async def test_each_consumer_has_its_own_entry(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        async with (
            consuming(q, name, succeed, poll_interval=3600) as first,
            consuming(q, f"{name}-other", succeed, poll_interval=3600) as second,
        ):
            listed = {w.id: w.queue for w in await q.workers()}
            assert listed[first.id] == name
            assert listed[second.id] == f"{name}-other"
            assert first.id != second.id

    async def test_a_live_consumer_heartbeats_as_time_passes(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        async with consuming(q, name, succeed, poll_interval=3600) as consumer:
            conformance.advance(10 * LIVE_FOR)
            now = conformance.now()
            [worker] = await _workers_until(
                q,
                lambda ws: any(
                    w.id == consumer.id and w.last_heartbeat.timestamp() == pytest.approx(now)
                    for w in ws
                ),
                "the consumer's heartbeat at the new time",
            )
            assert worker.id == consumer.id

    async def test_the_heartbeat_carries_the_consumer_counts(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue_many(name, [1, 2])
        handled = anyio.Event()

        async def count(job: Job, ctx: JobContext) -> None:
            if job.payload == 2:
                handled.set()
                raise RuntimeError("the second one fails")

        async with consuming(q, name, count, poll_interval=3600) as consumer:
            await wait_until(
                lambda: consumer.stats.succeeded + consumer.stats.failed == 2, "both jobs"
            )
            conformance.advance(5)  # one heartbeat interval
            await _workers_until(
                q,
                lambda ws: any(w.id == consumer.id and w.succeeded == 1 for w in ws),
                "a heartbeat with the counts",
            )
            [worker] = [w for w in await q.workers() if w.id == consumer.id]
            assert (worker.succeeded, worker.failed, worker.in_flight) == (1, 1, 0)

    async def test_a_worker_silent_for_three_heartbeats_is_not_live(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        backend = Inspection.of(q._runtimes[BACKEND].backend)  # a dead worker's leftover
        now = conformance.now()
        record = WorkerRecord(
            id=f"worker-{name}",
            queue=name,
            host="elsewhere",
            pid=1,
            concurrency=1,
            started_at=now - 100,
            heartbeat_at=now,
        )
        await backend.worker_heartbeat(record)
        assert record.id in {w.id for w in await q.workers()}
        conformance.advance(LIVE_FOR + 1)
        assert record.id not in {w.id for w in await q.workers()}

    async def test_workers_of_another_process_are_listed(self, conformance: Conformance) -> None:
        async with conformance.factory.open() as other:
            await conformance.require_shared_store(conformance.queue, other)
            async with consuming(other, conformance.name, succeed, poll_interval=3600) as consumer:
                ids = {w.id for w in await conformance.queue.workers()}
                assert consumer.id in ids


@lacking("inspection", "TestGetJob and its neighbours apply")
class TestWithoutInspection:
    async def test_each_inspection_call_is_answered_or_refused_clearly(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: q.get_job(job_id),
            lambda: q.job_info(job_id),
            lambda: q.list_jobs(name),
            q.queues,
            q.workers,
        ]
        refusals: list[UnsupportedError] = []
        for call in calls:
            try:
                await call()
            except UnsupportedError as exc:
                refusals.append(exc)
        protocol = conformance.factory.config["protocol"]
        assert all(f"(protocol {protocol!r}) cannot" in exc.message for exc in refusals)

    async def test_consumers_run_without_a_worker_registry(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x")
        handled = anyio.Event()

        async def record(job: Job, ctx: JobContext) -> None:
            handled.set()

        async with consuming(q, name, record, poll_interval=0.01):
            with anyio.fail_after(SAFETY_NET):
                await handled.wait()
