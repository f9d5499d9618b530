"""SPEC §11: ``Queue.cancel(job_id)`` ends a job in the terminal state ``cancelled``.

A pending, delayed or parked job is removed from the queue; a running one is cancelled at once
in the store (its lease fenced) and its handler is cancelled by its worker at the next
heartbeat.  Backends whose capabilities exclude ``cancel`` refuse with
``queue/cancel-unsupported``.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from blamequeue import Consumer, Job, JobContext

from .fixtures import Conformance, succeed, wait_for, wait_until
from .flows import fetch_then_parse
from .refusals import refused
from .requirements import lacking, requires, requires_virtual_leases
from .running import Hanging, dead_job, done_job, stop

__all__ = ["TestCancel", "TestCancelRunning", "TestWithoutCancel"]

_LEASE = 30.0


async def _running(conformance: Conformance, **options: Any) -> tuple[str, Hanging, Consumer]:
    """A job of the test's queue running in a consumer (lease :data:`_LEASE`, ``options`` as
    for ``Queue.consume``) under a handler that hangs until released; the job's id, the
    handler and the consumer."""
    job_id = await conformance.queue.enqueue(conformance.name, "x")
    handler = Hanging()
    consumer = await conformance.queue.consume(conformance.name, handler, lease=_LEASE, **options)
    await wait_for(handler.started, "the handler to start")
    return job_id, handler, consumer


async def _parked_flow(conformance: Conformance) -> tuple[str, str]:
    """A :func:`fetch_then_parse` flow on the test's queue (the test skips on a backend
    without flows); the ids of ``fetch`` and of ``parse``, parked behind it."""
    conformance.require("flows", "parked flow children need flows")
    flow = await conformance.queue.enqueue_flow(conformance.name, fetch_then_parse())
    fetch, parse = (job.job_id for job in flow.jobs)
    return fetch, parse


async def _state(conformance: Conformance, job_id: str) -> str | None:
    if not conformance.capabilities.inspection:
        return None
    info = await conformance.queue.job_info(job_id)
    return None if info is None else info.state


@requires("cancel", "the backend cannot cancel a job by id")
class TestCancel:
    async def test_cancel_pending_job_removes_it_from_the_queue(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        assert await q.cancel(job_id) is True
        assert await conformance.size() == 0
        assert await conformance.leasable() == 0
        [event] = conformance.audit.named("system.job.cancelled")
        assert (event.queue, event.job_id) == (name, job_id)

    async def test_cancelled_job_is_listed_and_counted_as_cancelled(
        self, conformance: Conformance
    ) -> None:
        conformance.require("inspection", "the cancelled job is read back by id")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        kept = await q.enqueue(name, "y")
        await q.cancel(job_id)
        info = await q.job_info(job_id)
        assert info is not None
        assert info.state == "cancelled"
        assert info.finished_at is not None
        assert info.finished_at.timestamp() == pytest.approx(conformance.now())
        page = await q.list_jobs(name, state="cancelled")
        assert [i.job.id for i in page.jobs] == [job_id]
        assert [i.job.id for i in (await q.list_jobs(name)).jobs] == [kept, job_id]
        [counts] = [c for c in await q.queues() if c.name == name]
        assert (counts.pending, counts.cancelled, counts.size) == (1, 1, 1)

    async def test_cancel_delayed_job_keeps_it_from_ever_coming_due(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "later", delay=60)
        assert await q.cancel(job_id) is True
        conformance.advance(61)
        assert await conformance.leasable() == 0
        assert await conformance.size() == 0

    async def test_cancel_of_a_finished_job_returns_false(self, conformance: Conformance) -> None:
        conformance.require_retained_done_jobs()
        q, name = conformance.queue, conformance.name
        job_id = await done_job(q, name)
        assert await q.cancel(job_id) is False
        assert await _state(conformance, job_id) in ("done", None)
        assert conformance.audit.named("system.job.cancelled") == []

    async def test_cancel_of_a_dead_job_returns_false_and_keeps_it_in_the_dlq(
        self, conformance: Conformance
    ) -> None:
        conformance.require("dlq", "the job must stay in the dead-letter queue")
        q, name = conformance.queue, conformance.name
        job_id = await dead_job(q, name)
        assert await q.cancel(job_id) is False
        assert [d.job_id for d in await q.dlq_list(name)] == [job_id]

    async def test_second_cancel_returns_false(self, conformance: Conformance) -> None:
        q = conformance.queue
        job_id = await q.enqueue(conformance.name, "x")
        assert await q.cancel(job_id) is True
        assert await q.cancel(job_id) is False
        assert len(conformance.audit.named("system.job.cancelled")) == 1

    async def test_cancel_of_an_unknown_job_raises_job_not_found(
        self, conformance: Conformance
    ) -> None:
        await refused("queue/job-not-found", conformance.queue.cancel("job-does-not-exist"))

    @pytest.mark.parametrize("bad", ["", None, 42])
    async def test_cancel_with_a_bad_id_is_refused(
        self, conformance: Conformance, bad: Any
    ) -> None:
        await refused("queue/bad-argument", conformance.queue.cancel(bad))

    async def test_cancelled_inflight_job_cannot_be_completed_by_its_old_lease(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        answers: list[bool] = []

        async def cancels_itself(job: Job, ctx: JobContext) -> None:
            answers.append(await q.cancel(job.id))

        result = await q.tick(name, cancels_itself)  # tick has no heartbeat: it finishes
        assert answers == [True]
        assert (result.succeeded, result.stale) == (0, 1)
        assert await _state(conformance, job_id) in ("cancelled", None)
        assert await conformance.size() == 0

    async def test_failed_attempt_of_a_cancelled_job_is_not_retried(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "x", max_attempts=5)

        async def cancels_then_fails(job: Job, ctx: JobContext) -> None:
            await q.cancel(job.id)
            raise RuntimeError("too late")

        result = await q.tick(name, cancels_then_fails)
        assert (result.failed, result.stale) == (0, 1)
        conformance.advance(3600)
        assert await conformance.leasable() == 0
        assert await conformance.size() == 0

    async def test_cancelled_inflight_job_is_not_recovered_by_the_sweep(
        self, conformance: Conformance
    ) -> None:
        conformance.require_virtual_leases()
        q = conformance.queue
        job_id, handler, consumer = await _running(conformance, heartbeat=False)
        assert await q.cancel(job_id) is True
        conformance.advance(_LEASE + 1)
        assert await q.sweep() == 0
        assert await conformance.leasable() == 0
        handler.release.set()  # without heartbeats nobody tells the handler: it finishes
        await stop(consumer)
        assert (consumer.stats.succeeded, consumer.stats.stale) == (0, 1)
        assert await _state(conformance, job_id) in ("cancelled", None)

    async def test_purge_deletes_cancelled_jobs(self, conformance: Conformance) -> None:
        conformance.require("inspection", "the purged job is looked up by id")
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        await q.cancel(job_id)
        assert await q.purge(name) == 0  # counts live jobs only
        assert await q.job_info(job_id) is None

    async def test_cancelled_job_is_pruned_after_retain_done(
        self, conformance: Conformance
    ) -> None:
        conformance.require("inspection", "the pruned job is looked up by id")
        async with conformance.factory.open(retain_done=5) as q:
            job_id = await q.enqueue(conformance.name, "x")
            await q.cancel(job_id)
            cancelled_at = conformance.now()
            conformance.advance_to(cancelled_at + 4.999)
            await q.sweep()
            assert await q.job_info(job_id) is not None
            conformance.advance_to(cancelled_at + 5.001)
            await q.sweep()
            assert await q.job_info(job_id) is None

    async def test_cancel_parked_flow_child(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        _, parse = await _parked_flow(conformance)
        assert await q.cancel(parse) is True
        assert (await q.tick(name, succeed)).succeeded == 1  # fetch
        assert await conformance.leasable() == 0  # parse stays cancelled
        assert await conformance.size() == 0

    async def test_dependants_of_a_cancelled_job_stay_parked(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        fetch, parse = await _parked_flow(conformance)
        assert await q.cancel(fetch) is True
        assert await conformance.leasable() == 0
        assert await conformance.size() == 1  # parse waits, as behind a dead dependency
        assert await _state(conformance, parse) in ("parked", None)
        assert await q.cancel(parse) is True
        assert await conformance.size() == 0


@requires("cancel", "the backend cannot cancel a job by id")
@requires_virtual_leases
class TestCancelRunning:
    """The worker running a cancelled job learns it at its next heartbeat."""

    async def test_cancel_stops_a_running_handler_at_the_next_heartbeat(
        self, conformance: Conformance
    ) -> None:
        q = conformance.queue
        job_id, handler, consumer = await _running(conformance, poll_interval=0.05)
        assert await q.cancel(job_id) is True
        assert await _state(conformance, job_id) in ("cancelled", None)  # at once
        assert not handler.cancelled
        conformance.advance(_LEASE / 3)
        await wait_until(lambda: handler.cancelled, "the heartbeat to cancel the handler")
        await wait_until(lambda: consumer.held == 0, "the consumer to drop the lease")
        assert (consumer.stats.succeeded, consumer.stats.failed, consumer.stats.stale) == (0, 0, 1)
        assert await conformance.size() == 0
        assert await _state(conformance, job_id) in ("cancelled", None)
        await stop(consumer)

    async def test_other_running_handlers_keep_going(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        doomed, kept = await q.enqueue_many(name, ["doomed", "kept"])
        handler = Hanging()
        consumer = await q.consume(name, handler, lease=_LEASE, concurrency=2, poll_interval=0.05)
        await wait_until(lambda: len(handler.job_ids) == 2, "both handlers to start")
        await q.cancel(doomed)
        conformance.advance(_LEASE / 3)
        await wait_until(lambda: handler.cancelled, "the heartbeat to cancel the handler")
        handler.release.set()
        await wait_until(lambda: consumer.stats.succeeded == 1, "the other job to complete")
        assert consumer.stats.stale == 1
        await stop(consumer)
        assert await _state(conformance, kept) in ("done", None)

    async def test_cancel_abandons_a_running_sync_handler(self, conformance: Conformance) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        started, release, returned = threading.Event(), threading.Event(), threading.Event()

        def blocking(job: Job, ctx: Any) -> None:
            started.set()
            release.wait(30)
            returned.set()

        consumer = await q.consume(name, blocking, lease=_LEASE, poll_interval=0.05)
        try:
            await wait_until(started.is_set, "the handler to start")
            assert await q.cancel(job_id) is True
            conformance.advance(_LEASE / 3)
            await wait_until(lambda: consumer.stats.stale == 1, "the heartbeat to abandon it")
            assert consumer.in_flight == 0
        finally:
            release.set()
        await anyio.to_thread.run_sync(returned.wait, 10)
        await stop(consumer)
        assert consumer.stats.succeeded == 0
        assert await _state(conformance, job_id) in ("cancelled", None)


@lacking("cancel", "TestCancel covers it")
class TestWithoutCancel:
    async def test_cancel_is_refused_with_cancel_unsupported(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        job_id = await q.enqueue(name, "x")
        await refused("queue/cancel-unsupported", q.cancel(job_id))
        assert await conformance.size() == 1
