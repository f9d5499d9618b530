"""SPEC §3 item 13, on time: an idle consumer's wait ends at the earliest due time the backend
knows of (the :class:`~blamequeue.abc.NextDue` facet), whatever its ``poll_interval``, so a delayed
job or a backoff retry starts when it is due, not at the next poll.

Every consumer here polls once an hour of the virtual clock: a test that moves the clock only to
the due time passes only when the wait ended there.
"""

from __future__ import annotations

import anyio
import pytest

from blamequeue import Consumer, Job, JobContext
from blamequeue.abc import NextDue

from .fixtures import BACKEND, Conformance, wait_for, wait_until
from .requirements import requires, requires_virtual_time
from .running import stop

__all__ = ["TestOnTime", "TestOnTimeAcrossProcesses"]

HOUR = 3600.0


def _next_due(conformance: Conformance) -> NextDue:
    backend = conformance.queue._runtimes[BACKEND].backend
    assert isinstance(backend, NextDue)
    return backend


async def _waits_until(conformance: Conformance, due: float) -> None:
    """Until a task sleeps on the clock until ``due``: the idle consumer, whose wait ends when
    the job is due (else it would sleep its hour-long poll)."""
    await wait_until(
        lambda: any(abs(deadline - due) < 1e-6 for deadline in conformance.clock.deadlines),
        f"the idle consumer to wait until {due - conformance.now():g} s from now",
    )


class _Starts:
    """A handler that notes the clock when each job starts, and its payload."""

    def __init__(self, conformance: Conformance) -> None:
        self.conformance = conformance
        self.started: list[tuple[object, float]] = []
        self.event = anyio.Event()

    async def __call__(self, job: Job, ctx: JobContext) -> None:
        self.started.append((job.payload, self.conformance.now()))
        self.event.set()


async def _idle_until(
    conformance: Conformance, payload: object, delay: float
) -> tuple[Consumer, _Starts]:
    """Enqueue ``payload`` delayed by ``delay`` and start a consumer that polls once an hour;
    back once it waits until that job is due."""
    due = conformance.now() + delay
    await conformance.queue.enqueue(conformance.name, payload, delay=delay)
    starts = _Starts(conformance)
    consumer = await conformance.queue.consume(
        conformance.name, starts, poll_interval=HOUR, heartbeat=False
    )
    await _waits_until(conformance, due)
    return consumer, starts


async def _runs_at_due_time(
    conformance: Conformance, consumer: Consumer, starts: _Starts, payload: object, due: float
) -> None:
    """Once the consumer waits until ``due``, move the clock there: the job of ``payload``, and
    only it, starts then."""
    await _waits_until(conformance, due)
    conformance.advance_to(due)
    await wait_for(starts.event, f"{payload!r} to start at its due time")
    await stop(consumer)
    assert starts.started == [(payload, due)]


@pytest.mark.anyio
@requires("next_due", "the backend cannot tell when the next job is due")
@requires_virtual_time("due times are reached by moving the clock")
class TestOnTime:
    async def test_next_due_is_the_earliest_pending_job_and_none_for_an_empty_queue(
        self, conformance: Conformance
    ) -> None:
        q, name, backend = conformance.queue, conformance.name, _next_due(conformance)
        now = conformance.now()
        assert await backend.next_due(name, now=now) is None
        await q.enqueue(name, "in a minute", delay=60)
        await q.enqueue(name, "in half a minute", delay=30)
        assert await backend.next_due(name, now=now) == pytest.approx(now + 30, abs=1e-3)
        await q.enqueue(name, "now")
        due = await backend.next_due(name, now=now)
        assert due is not None
        assert due <= now

    async def test_an_idle_consumer_starts_a_delayed_job_when_due_not_at_its_next_poll(
        self, conformance: Conformance
    ) -> None:
        due = conformance.now() + 60
        consumer, starts = await _idle_until(conformance, "later", 60)
        await _runs_at_due_time(conformance, consumer, starts, "later", due)

    async def test_a_sooner_job_enqueued_while_idle_shortens_the_wait(
        self, conformance: Conformance
    ) -> None:
        consumer, starts = await _idle_until(conformance, "in ten minutes", 600)
        soon = conformance.now() + 30
        await conformance.queue.enqueue(conformance.name, "in half a minute", delay=30)
        await _runs_at_due_time(conformance, consumer, starts, "in half a minute", soon)

    async def test_a_backoff_retry_starts_when_due_not_at_the_next_poll(
        self, conformance: Conformance
    ) -> None:
        q, name = conformance.queue, conformance.name
        await q.enqueue(name, "flaky", max_attempts=3, backoff=[600])
        runs: list[tuple[int, float]] = []

        async def flaky(job: Job, ctx: JobContext) -> None:
            runs.append((job.attempts, conformance.now()))
            if job.attempts == 1:
                raise RuntimeError("the first attempt fails")

        consumer = await q.consume(name, flaky, poll_interval=HOUR, heartbeat=False)
        await wait_until(lambda: consumer.stats.failed == 1, "the first attempt to fail")
        failed_at = runs[0][1]
        await _waits_until(conformance, failed_at + 600)  # the job's backoff
        conformance.advance_to(failed_at + 600)
        await wait_until(lambda: consumer.stats.succeeded == 1, "the retry to start when due")
        await stop(consumer)
        assert runs == [(1, failed_at), (2, failed_at + 600)]


@pytest.mark.anyio
@requires("next_due", "the backend cannot tell when the next job is due")
@requires("cross_process_wakeup", "the backend cannot hear another process enqueue")
@requires_virtual_time("due times are reached by moving the clock")
class TestOnTimeAcrossProcesses:
    async def test_a_sooner_job_another_process_enqueues_shortens_the_wait(
        self, conformance: Conformance
    ) -> None:
        consumer, starts = await _idle_until(conformance, "in ten minutes", 600)
        soon = conformance.now() + 30
        async with conformance.factory.open() as producer:  # another process, as it were
            await producer.enqueue(conformance.name, "in half a minute", delay=30)
            await _runs_at_due_time(conformance, consumer, starts, "in half a minute", soon)
