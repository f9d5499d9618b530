"""Waiting for work on a real clock: the :class:`~blamequeue.abc.Wakeup` facet (an idle wait ends
as soon as another process enqueues) and the speed-only :class:`~blamequeue.abc.WaitAndLease`
facet (the wait and the lease in one exchange, giving back what a cancelled wait took).

These tests call the backend under the queue directly and wait in real time (a few tenths of a
second at most when the backend works; :data:`SAFETY_NET` seconds before a hung wait fails).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio

from blamequeue import Queue
from blamequeue.abc import Backend, Lease, Settlement, WaitAndLease, Wakeup

from .fixtures import BACKEND, SAFETY_NET, Conformance, succeed
from .requirements import requires

__all__ = ["TestWaitAndLease", "TestWakeup"]

LEASE = 30.0
PRODUCE_EVERY = 0.1
"""Real seconds between the producer's enqueues while a wait has not ended: a backend may miss an
enqueue made before its wait reached the store, never one made while it waits."""


def _backend(queue: Queue) -> Backend:
    backend: Backend = queue._runtimes[BACKEND].backend
    return backend


async def _an_empty_queue_that_exists(conformance: Conformance) -> None:
    """Enqueue one job and run it, so the queue exists in the store (SQS creates it on first
    use and long-polls only a queue that exists) and holds nothing due."""
    await conformance.queue.enqueue(conformance.name, "first")
    await conformance.queue.tick(conformance.name, succeed)


async def _until(ended: anyio.Event, produce: Callable[[], Awaitable[object]]) -> None:
    """Run ``produce`` (another process enqueueing) until ``ended`` is set, within the net."""
    with anyio.fail_after(SAFETY_NET):
        while not ended.is_set():
            await produce()
            with anyio.move_on_after(PRODUCE_EVERY):
                await ended.wait()


@requires("cross_process_wakeup", "the backend cannot hear another process enqueue")
class TestWakeup:
    async def test_a_wait_ends_early_when_another_process_enqueues(
        self, conformance: Conformance
    ) -> None:
        await _an_empty_queue_that_exists(conformance)
        waiter = _backend(conformance.queue)
        assert isinstance(waiter, Wakeup)
        ended = anyio.Event()

        async def wait() -> None:
            await waiter.wait_for_work(conformance.name, timeout=3 * SAFETY_NET)
            ended.set()

        async with conformance.factory.open() as producer, anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await _until(ended, lambda: producer.enqueue(conformance.name, "wake"))

    async def test_a_wait_with_nothing_to_hear_returns_after_its_timeout(
        self, conformance: Conformance
    ) -> None:
        await _an_empty_queue_that_exists(conformance)
        waiter = _backend(conformance.queue)
        with anyio.fail_after(SAFETY_NET):
            await waiter.wait_for_work(conformance.name, timeout=0.05)
        assert await conformance.queue.size(conformance.name) == 0


@requires("wait_and_lease", "the backend has no wait that leases (a speed-only facet)")
class TestWaitAndLease:
    async def _wait_and_lease(self, conformance: Conformance, *, limit: int) -> list[Lease]:
        backend = _backend(conformance.queue)
        assert isinstance(backend, WaitAndLease)
        now = conformance.now()
        taken = await backend.wait_and_lease(
            conformance.name, timeout=0.2, limit=limit, now=now, lease_seconds=LEASE
        )
        if taken is None:  # the backend only waited this time: the caller leases
            taken = await backend.lease(
                conformance.name, limit=limit, now=conformance.now(), lease_seconds=LEASE
            )
        return taken

    async def test_an_idle_wait_leases_what_another_process_enqueues(
        self, conformance: Conformance
    ) -> None:
        leases: list[Lease] = []
        ended = anyio.Event()

        async def wait() -> None:
            while not leases:
                leases.extend(await self._wait_and_lease(conformance, limit=5))
            ended.set()

        async with conformance.factory.open() as producer, anyio.create_task_group() as tg:
            tg.start_soon(wait)
            job_ids: list[str] = []

            async def produce_once() -> None:
                if not job_ids:
                    job_ids.append(await producer.enqueue(conformance.name, "wake"))

            await _until(ended, produce_once)
        assert [lease.job.id for lease in leases] == job_ids
        [lease] = leases
        assert (lease.job.state, lease.job.attempts) == ("inflight", 1)
        backend = _backend(conformance.queue)
        # The lease's token owns the job: settling with it applies, once.
        done = Settlement(job_id=lease.job.id, token=lease.token, outcome="done", at=time.time())
        assert await backend.settle([done], now=conformance.now()) == [True]
        assert await backend.settle([done], now=conformance.now()) == [False]

    async def test_a_wait_leases_no_more_than_its_limit(self, conformance: Conformance) -> None:
        for n in range(5):
            await conformance.queue.enqueue(conformance.name, n)
        seen: list[str] = []
        with anyio.fail_after(SAFETY_NET):
            while len(seen) < 5:
                leases = await self._wait_and_lease(conformance, limit=2)
                assert len(leases) <= 2
                seen += [lease.job.id for lease in leases]
        assert len(set(seen)) == 5

    async def test_a_cancelled_wait_leaves_nothing_leased(self, conformance: Conformance) -> None:
        backend = _backend(conformance.queue)
        assert isinstance(backend, WaitAndLease)
        with anyio.move_on_after(0.2):
            await backend.wait_and_lease(
                conformance.name,
                timeout=SAFETY_NET,
                limit=5,
                now=conformance.now(),
                lease_seconds=LEASE,
            )
        job_id = await conformance.queue.enqueue(conformance.name, "after the cancelled wait")
        with anyio.fail_after(SAFETY_NET):
            leases = await backend.lease(
                conformance.name, limit=5, now=conformance.now(), lease_seconds=LEASE
            )
        assert [(lease.job.id, lease.job.attempts) for lease in leases] == [(job_id, 1)]

    async def test_waits_cancelled_as_work_arrives_lose_no_job(
        self, conformance: Conformance
    ) -> None:
        backend = _backend(conformance.queue)
        assert isinstance(backend, WaitAndLease)
        returned: list[Lease] = []
        enqueued: list[str] = []
        async with conformance.factory.open() as producer:
            for n in range(10):

                async def wait(patience: float = 0.005 * (n % 5)) -> None:
                    with anyio.move_on_after(patience):
                        taken = await backend.wait_and_lease(
                            conformance.name,
                            timeout=SAFETY_NET,
                            limit=5,
                            now=conformance.now(),
                            lease_seconds=LEASE,
                        )
                        returned.extend(taken or [])

                with anyio.fail_after(SAFETY_NET):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(wait)
                        enqueued.append(await producer.enqueue(conformance.name, n))
        with anyio.fail_after(SAFETY_NET):
            rest = await backend.lease(
                conformance.name, limit=100, now=conformance.now(), lease_seconds=LEASE
            )
        # Each job is either in the answer of a wait that returned or still there to lease.
        ids = [lease.job.id for lease in returned] + [lease.job.id for lease in rest]
        assert sorted(ids) == sorted(enqueued)
