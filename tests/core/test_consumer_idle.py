"""An idle consumer on real time waits in one task: the backend's wait, ended early by a
same-process enqueue (``BackendRuntime.notify`` cancels it) or by its deadline.  A wait that
fails only means polling on time, never spinning."""

from __future__ import annotations

from typing import ClassVar

import anyio
import pytest

from blamequeue import Job, JobContext, Queue, RateLimit
from blamequeue._plugins import Registration, load_registry
from blamequeue.abc import Lease, WaitAndLease
from blamequeue_testing._memory import MemoryBackend

pytestmark = pytest.mark.anyio

SAFETY_NET = 10.0  # real seconds before a wait is declared hung (never reached when it works)


class DeafBackend(MemoryBackend):
    """Hears no enqueue itself: only the core's same-process wake-up ends its wait early."""

    protocol = "deaf-memory"
    waits: ClassVar[int] = 0

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        DeafBackend.waits += 1
        await anyio.sleep(timeout)


class LeasingWaitBackend(MemoryBackend, WaitAndLease):
    """Leases as its wait ends (what redis does in one exchange), and says how often."""

    protocol = "leasing-wait-memory"
    leased_by_wait: ClassVar[list[str]] = []
    limits_seen: ClassVar[list[int]] = []
    log: ClassVar[list[str]] = []

    async def wait_and_lease(
        self, queue: str, *, timeout: float, limit: int, now: float, lease_seconds: float
    ) -> list[Lease] | None:
        LeasingWaitBackend.limits_seen.append(limit)
        LeasingWaitBackend.log.append("wait")
        await self.wait_for_work(queue, timeout=timeout)
        leases = await self.lease(
            queue, limit=limit, now=self.context.clock.now(), lease_seconds=lease_seconds
        )
        LeasingWaitBackend.leased_by_wait += [lease.job.id for lease in leases]
        return leases


class BrokenWaitBackend(DeafBackend):
    protocol = "broken-wait-memory"

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        DeafBackend.waits += 1
        raise RuntimeError("the wait is broken")


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    for backend in (DeafBackend, BrokenWaitBackend, LeasingWaitBackend):
        monkeypatch.setitem(
            load_registry().protocols,
            backend.protocol,
            Registration(value=backend, plugin="tests"),
        )
    monkeypatch.setattr(DeafBackend, "waits", 0)
    monkeypatch.setattr(LeasingWaitBackend, "leased_by_wait", [])
    monkeypatch.setattr(LeasingWaitBackend, "limits_seen", [])
    monkeypatch.setattr(LeasingWaitBackend, "log", [])


async def test_a_same_process_enqueue_wakes_an_idle_consumer_long_before_its_poll() -> None:
    started = anyio.Event()

    async def handler(job: Job, ctx: JobContext) -> None:
        started.set()

    async with Queue(backends={"m": {"protocol": "deaf-memory"}}) as queue:
        runtime = queue._runtime(None)
        consumer = await queue.consume("q", handler, poll_interval=3600.0)
        with anyio.fail_after(SAFETY_NET):
            while not DeafBackend.waits:  # noqa: ASYNC110 - the consumer's own task
                await anyio.sleep(0.001)
            await queue.enqueue("q", {"n": 1})
            await started.wait()
        consumer.cancel()
        await consumer.wait_stopped()
        # Every wait took its scope back out of the runtime.
        assert runtime._wake_scopes == {}


async def test_every_idle_consumer_of_the_queue_is_woken() -> None:
    ran: list[int] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        ran.append(job.payload["n"])

    async with Queue(backends={"m": {"protocol": "deaf-memory"}}) as queue:
        consumers = [await queue.consume("q", handler, poll_interval=3600.0) for _ in range(3)]
        with anyio.fail_after(SAFETY_NET):
            while DeafBackend.waits < 3:  # noqa: ASYNC110 - the consumers' own tasks
                await anyio.sleep(0.001)
            await queue.enqueue_many("q", [{"n": n} for n in range(6)])
            while len(ran) < 6:  # noqa: ASYNC110 - the consumers' own tasks
                await anyio.sleep(0.001)
        for consumer in consumers:
            consumer.cancel()
            await consumer.wait_stopped()
    assert sorted(ran) == list(range(6))


async def test_a_failing_wait_means_polling_on_time_not_spinning() -> None:
    async def handler(job: Job, ctx: JobContext) -> None:
        pass

    async with Queue(backends={"m": {"protocol": "broken-wait-memory"}}) as queue:
        consumer = await queue.consume("q", handler, poll_interval=0.05)
        await anyio.sleep(0.5)
        consumer.cancel()
        await consumer.wait_stopped()
    # About one wait per poll interval (10 in 0.5 s); a spinning loop would make thousands.
    assert 1 <= DeafBackend.waits <= 40


async def test_jobs_an_idle_wait_leased_as_it_ended_are_run() -> None:
    ran: list[int] = []
    config = {"protocol": "leasing-wait-memory", "namespace": "idle-lease"}

    async def handler(job: Job, ctx: JobContext) -> None:
        ran.append(job.payload["n"])

    # The producer is another queue on the same store (as another process would be): its
    # enqueues wake the consumer through the backend's wait, not the core's same-process call.
    async with Queue(backends={"m": config}) as worker, Queue(backends={"m": config}) as producer:
        consumer = await worker.consume("q", handler, concurrency=4, poll_interval=3600.0)
        with anyio.fail_after(SAFETY_NET):
            for n in range(3):
                while not LeasingWaitBackend.limits_seen:  # noqa: ASYNC110 - the consumer's task
                    await anyio.sleep(0.001)
                await producer.enqueue("q", {"n": n})
                while len(ran) <= n:  # noqa: ASYNC110 - the consumer's own task
                    await anyio.sleep(0.001)
        consumer.cancel()
        await consumer.wait_stopped()
        assert consumer.stats.leased == 3
    assert ran == [0, 1, 2]
    assert len(LeasingWaitBackend.leased_by_wait) == 3
    assert set(LeasingWaitBackend.limits_seen) <= {1, 2, 3, 4}


async def test_a_job_an_idle_wait_leased_starts_before_the_next_wait_is_set_up() -> None:
    # The queue looked drained, so the consumer waits again at once; setting that wait up
    # before the worker starts the job would add its cost to the job's latency.
    config = {"protocol": "leasing-wait-memory", "namespace": "idle-order"}

    async def handler(job: Job, ctx: JobContext) -> None:
        LeasingWaitBackend.log.append("run")

    async with Queue(backends={"m": config}) as worker, Queue(backends={"m": config}) as producer:
        consumer = await worker.consume("q", handler, concurrency=4, poll_interval=3600.0)
        with anyio.fail_after(SAFETY_NET):
            while LeasingWaitBackend.log != ["wait"]:  # noqa: ASYNC110 - the consumer's task
                await anyio.sleep(0.001)
            await producer.enqueue("q", {"n": 1})
            while len(LeasingWaitBackend.log) < 3:  # noqa: ASYNC110 - the consumer's task
                await anyio.sleep(0.001)
        consumer.cancel()
        await consumer.wait_stopped()
    assert LeasingWaitBackend.log[:3] == ["wait", "run", "wait"]


async def test_under_fleet_limits_an_idle_wait_only_waits() -> None:
    config = {"protocol": "leasing-wait-memory", "namespace": "idle-limits"}

    async def handler(job: Job, ctx: JobContext) -> None:
        pass

    async with Queue(backends={"m": config}) as queue:
        consumer = await queue.consume(
            "q", handler, poll_interval=0.02, rate_limit=RateLimit(max=100, per_seconds=1.0)
        )
        await anyio.sleep(0.2)
        consumer.cancel()
        await consumer.wait_stopped()
    assert LeasingWaitBackend.limits_seen == []
