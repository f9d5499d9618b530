"""The inspection API around the backends: refusals of backends without it, the worker registry
as consumers drive it, unreadable payloads, and the cursor helper of the backend contract.
(What every backend must answer is in the conformance suite: blamequeue_testing._conformance.
inspection.)"""

from __future__ import annotations

import base64
from typing import Any

import anyio
import pytest

from blamequeue import Job, JobContext, Queue, QueueError
from blamequeue._plugins import Registration, load_registry
from blamequeue._presence import HEARTBEAT_INTERVAL, LIVE_FOR
from blamequeue.abc import JobCursor, WorkerRecord
from blamequeue.errors import BackendUnavailableError, UnsupportedError
from blamequeue_testing import MemoryBackend, VirtualClock
from testing.required_only import RequiredOnlyBackend

pytestmark = pytest.mark.anyio

HANG_GUARD = 10.0


class UninspectableBackend(RequiredOnlyBackend):
    """A store without the Inspection facet, as a third-party backend written before
    inspection existed."""

    protocol = "uninspectable"


class FlakyRegistryBackend(MemoryBackend):
    """A memory store whose worker registry is down while ``down`` is set."""

    protocol = "flaky-registry"
    down = False

    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        if FlakyRegistryBackend.down:
            raise BackendUnavailableError("the registry is restarting")
        await super().worker_heartbeat(worker)


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch) -> None:
    protocols = load_registry().protocols
    for cls in (UninspectableBackend, FlakyRegistryBackend):
        monkeypatch.setitem(protocols, cls.protocol, Registration(value=cls, plugin="tests"))
    monkeypatch.setattr(FlakyRegistryBackend, "down", False)


def _queue(protocol: str, clock: VirtualClock | None = None, **config: Any) -> Queue:
    return Queue(
        backends={"b": {"protocol": protocol, **config}},
        clock=clock or VirtualClock(),
        sweep_interval=0,
    )


async def _stopped(consumer: Any) -> None:
    consumer.cancel()
    with anyio.fail_after(HANG_GUARD):
        await consumer.wait_stopped()


# -- backends without inspection -----------------------------------------------------------------
@pytest.mark.usefixtures("register")
async def test_each_inspection_call_on_a_backend_without_it_is_refused_naming_the_backend() -> None:
    async with _queue("uninspectable") as queue:
        job_id = await queue.enqueue("q", "x")
        for call in (
            queue.get_job(job_id),
            queue.job_info(job_id),
            queue.list_jobs("q"),
            queue.queues(),
            queue.workers(),
        ):
            with pytest.raises(UnsupportedError) as info:
                await call
            assert "backend 'b' (protocol 'uninspectable') cannot" in info.value.message
            assert "capabilities include inspection" in info.value.message
            assert not info.value.retryable


@pytest.mark.usefixtures("register")
async def test_a_consumer_on_a_backend_without_a_registry_runs_on() -> None:
    clock = VirtualClock()
    async with _queue("uninspectable", clock) as queue:
        handled = anyio.Event()

        async def handler(job: Job, ctx: JobContext) -> None:
            handled.set()

        consumer = await queue.consume("q", handler, poll_interval=0.01)
        clock.advance(10 * HEARTBEAT_INTERVAL)
        await queue.enqueue("q", "x")
        with anyio.fail_after(HANG_GUARD):
            await handled.wait()
        await _stopped(consumer)
        [status] = queue.list_backends()
        assert status.breaker_state == "closed"


@pytest.mark.usefixtures("register")
async def test_a_failing_heartbeat_leaves_the_consumer_working_and_a_later_one_registers() -> None:
    clock = VirtualClock()
    retry = {"attempts": 1, "base": 0, "cap": 0}
    async with _queue("flaky-registry", clock, retry=retry) as queue:
        FlakyRegistryBackend.down = True
        handled = anyio.Event()

        async def handler(job: Job, ctx: JobContext) -> None:
            handled.set()

        consumer = await queue.consume("q", handler, poll_interval=0.01)
        assert await queue.workers() == []
        FlakyRegistryBackend.down = False
        clock.advance(HEARTBEAT_INTERVAL)
        with anyio.fail_after(HANG_GUARD):
            while not await queue.workers():  # noqa: ASYNC110 - polling another task's write
                await anyio.sleep(0.001)
        await queue.enqueue("q", "x")
        with anyio.fail_after(HANG_GUARD):
            await handled.wait()
        [worker] = await queue.workers()
        assert worker.id == consumer.id
        await _stopped(consumer)


async def test_a_worker_is_live_for_three_heartbeat_intervals() -> None:
    assert LIVE_FOR == 3 * HEARTBEAT_INTERVAL
    clock = VirtualClock()
    async with _queue("memory", clock) as queue:
        backend = queue._runtimes["b"].backend
        now = clock.now()
        record = WorkerRecord(
            id="worker-x",
            queue="q",
            host="h",
            pid=1,
            concurrency=1,
            started_at=now,
            heartbeat_at=now,
        )
        await backend.worker_heartbeat(record)
        clock.advance(LIVE_FOR)
        assert [w.id for w in await queue.workers()] == ["worker-x"]
        clock.advance(0.001)
        assert await queue.workers() == []


# -- payloads that do not unseal -------------------------------------------------------------
def _key(byte: int) -> dict[str, Any]:
    return {"keys": {f"k{byte}": base64.b64encode(bytes([byte]) * 32).decode()}}


async def test_get_job_refuses_an_unreadable_payload_and_job_info_shows_the_job_anyway() -> None:
    config = {"protocol": "memory", "namespace": "inspection-unseal"}
    try:
        async with Queue(backends={"b": {**config, "seal": _key(1)}}) as writer:
            job_id = await writer.enqueue("q", {"secret": 1})
        async with Queue(backends={"b": {**config, "seal": _key(2)}}) as reader:
            with pytest.raises(QueueError) as info:
                await reader.get_job(job_id)
            assert info.value.code == "queue/unseal-failed"
            shown = await reader.job_info(job_id)
            assert shown is not None
            assert (shown.state, shown.job.payload) == ("pending", None)
            assert shown.payload_error is not None
            assert "queue/unseal-failed" in shown.payload_error
            [listed] = (await reader.list_jobs("q")).jobs
            assert listed.payload_error == shown.payload_error
    finally:
        MemoryBackend.forget_namespace("inspection-unseal")


# -- the cursor helper -------------------------------------------------------------------------
def test_a_job_cursor_reads_back_what_it_wrote() -> None:
    cursor = JobCursor(state="parked", seq=42)
    assert cursor.encode() == "parked:42"
    assert JobCursor.decode(cursor.encode()) == cursor


@pytest.mark.parametrize(
    "text",
    ["", "pending", "pending:", "pending:x", "gone:1", "dead:-1", "dead:1:2", "dead:\u0661"],
)
def test_a_job_cursor_refuses_text_it_did_not_write(text: str) -> None:
    with pytest.raises(QueueError) as info:
        JobCursor.decode(text)
    assert info.value.code == "queue/bad-argument"


def test_a_job_cursor_orders_by_state_then_seq() -> None:
    cursor = JobCursor(state="inflight", seq=10)
    assert cursor.after("inflight", 11)
    assert cursor.after("parked", 1)
    assert not cursor.after("inflight", 10)
    assert not cursor.after("pending", 99)
