"""Slow and hostile handlers: the worker survives, the lease fence holds, and the job ends where
SPEC §2 and §3 say.  On the memory and local backends, on asyncio and trio.

Handlers that hang past their lease (``tick`` does not renew: stale once another worker took
the job; ``consume`` renews with its heartbeat: the job stays), raise ``BaseException``
subclasses (the attempt fails, the worker lives on), swallow the cancellation a shutdown sends
them, return values JSON cannot hold, or block a thread past the shutdown deadline.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from reliability_report import Tally

import blamequeue._queue
from blamequeue import Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

Q = "hostile"
#: How long a test waits for something it expects before it fails: a hang guard, not a timing.
HANG_GUARD = 60.0


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A backend config; two queues built from it share one store (like two workers)."""
    if request.param == "memory":
        return {"protocol": "memory", "namespace": f"hostile-{uuid.uuid4().hex}"}
    return {"protocol": "local", "path": str(tmp_path / "hostile.db")}


def where(store: dict[str, Any], anyio_backend: str) -> str:
    return f"{store['protocol']}/{anyio_backend}"


def queue_on(store: dict[str, Any], clock: VirtualClock | None = None) -> Queue:
    return Queue(backends={"b": store}, sweep_interval=0, clock=clock)


# -- hanging past the lease ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_tick_handler_that_outlives_its_lease_is_stale_once_another_worker_ran_the_job(
    store: dict[str, Any], anyio_backend: str, kind: str, reliability_tally: Tally
) -> None:
    clock = VirtualClock()
    queue = queue_on(store, clock)
    started = threading.Event()
    gate = threading.Event()
    attempts: list[tuple[str, int]] = []

    async def hang_async(job: Job, ctx: JobContext) -> str:
        attempts.append(("slow", job.attempts))
        started.set()
        await anyio.to_thread.run_sync(gate.wait)
        return "late"

    def hang_sync(job: Job, ctx: Any) -> str:
        attempts.append(("slow", job.attempts))
        started.set()
        gate.wait()
        return "late"

    async def quick(job: Job, ctx: JobContext) -> None:
        attempts.append(("quick", job.attempts))

    results: dict[str, Any] = {}
    async with queue:
        await queue.enqueue(Q, {"n": 1})

        async def slow_worker() -> None:
            handler = hang_async if kind == "async" else hang_sync
            results["slow"] = await queue.tick(Q, handler, lease=10)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_worker)
            with anyio.fail_after(HANG_GUARD):
                await anyio.to_thread.run_sync(started.wait)
            clock.advance(11)  # the lease ran out; tick never renews it
            results["quick"] = await queue.tick(Q, quick, lease=10)
            gate.set()
        size = await queue.size(Q)

    slow, quick_result = results["slow"], results["quick"]
    reliability_tally.add(
        "hostile: handler outlives its tick lease",
        where(store, anyio_backend),
        enqueued=1,
        completed=quick_result.succeeded,
        run_more_than_once=1,
        stale=slow.stale,
    )
    assert attempts == [("slow", 1), ("quick", 2)]
    assert (quick_result.leased, quick_result.succeeded) == (1, 1)
    assert (slow.leased, slow.succeeded, slow.failed, slow.stale) == (1, 0, 0, 1)
    assert size == 0


async def test_consume_heartbeats_keep_a_slow_handlers_job_for_as_long_as_it_runs(
    store: dict[str, Any], anyio_backend: str, reliability_tally: Tally
) -> None:
    clock = VirtualClock()
    queue = queue_on(store, clock)
    lease = 9.0
    started = anyio.Event()
    release = anyio.Event()
    contexts: list[JobContext] = []
    others: list[Job] = []

    async def slow(job: Job, ctx: JobContext) -> None:
        contexts.append(ctx)
        started.set()
        await release.wait()

    async def other(job: Job, ctx: JobContext) -> None:
        others.append(job)

    async with queue:
        await queue.enqueue(Q, {"n": 1})
        consumer = await queue.consume(Q, slow, lease=lease, poll_interval=0.05)
        with anyio.fail_after(HANG_GUARD):
            await started.wait()
        [ctx] = contexts
        renewals = 0
        for _ in range(12):  # four whole leases of virtual time
            await clock.advance_and_settle(lease / 3)
            # The renewal is a backend call (on a worker thread for SQLite): wait for it.
            with anyio.fail_after(HANG_GUARD):
                while ctx.lease_expires_at.timestamp() < clock.now() + lease - 0.01:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            renewals += 1
            assert await queue.sweep() == 0, "a live handler's lease never expires"
            assert (await queue.tick(Q, other, lease=lease)).leased == 0
        release.set()
        consumer.cancel()
        with anyio.fail_after(HANG_GUARD):
            await consumer.wait_stopped()
        size = await queue.size(Q)

    reliability_tally.add(
        "hostile: slow handler kept by heartbeats (consume)",
        where(store, anyio_backend),
        enqueued=1,
        completed=consumer.stats.succeeded,
        renewals=renewals,
    )
    assert not others
    assert (consumer.stats.succeeded, consumer.stats.stale, consumer.stats.failed) == (1, 0, 0)
    assert size == 0


async def test_without_heartbeats_a_consumers_slow_handler_is_stale_once_another_ran_the_job(
    store: dict[str, Any], anyio_backend: str, reliability_tally: Tally
) -> None:
    clock = VirtualClock()
    queue = queue_on(store, clock)
    started = anyio.Event()
    release = anyio.Event()
    attempts: list[tuple[str, int]] = []

    async def slow(job: Job, ctx: JobContext) -> None:
        attempts.append(("slow", job.attempts))
        started.set()
        await release.wait()

    async def quick(job: Job, ctx: JobContext) -> None:
        attempts.append(("quick", job.attempts))

    async with queue:
        await queue.enqueue(Q, {"n": 1})
        consumer = await queue.consume(Q, slow, lease=5, poll_interval=0.05, heartbeat=False)
        with anyio.fail_after(HANG_GUARD):
            await started.wait()
        consumer.cancel()  # lease no more: the job is the only one in flight
        clock.advance(6)
        result = await queue.tick(Q, quick, lease=5)
        release.set()
        with anyio.fail_after(HANG_GUARD):
            await consumer.wait_stopped()
        size = await queue.size(Q)

    reliability_tally.add(
        "hostile: slow handler without heartbeats (consume)",
        where(store, anyio_backend),
        enqueued=1,
        completed=result.succeeded,
        run_more_than_once=1,
        stale=consumer.stats.stale,
    )
    assert attempts == [("slow", 1), ("quick", 2)]
    assert result.succeeded == 1
    assert (consumer.stats.succeeded, consumer.stats.stale) == (0, 1)
    assert size == 0


# -- BaseException subclasses -------------------------------------------------------------------
class HandlerAbort(BaseException):
    """A BaseException of the handler's own, like the ones some frameworks use to unwind."""


EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt,
    "HandlerAbort": lambda: HandlerAbort("unwinding"),
    "GeneratorExit": GeneratorExit,
}


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
async def test_a_handler_raising_a_base_exception_fails_its_attempt_and_the_worker_lives_on(
    store: dict[str, Any],
    anyio_backend: str,
    name: str,
    kind: str,
    request: pytest.FixtureRequest,
    reliability_tally: Tally,
) -> None:
    make = EXCEPTIONS[name]

    async def raise_async(job: Job, ctx: JobContext) -> None:
        if job.payload["raise"]:
            raise make()

    def raise_sync(job: Job, ctx: Any) -> None:
        if job.payload["raise"]:
            raise make()

    handler: Any = raise_async if kind == "async" else raise_sync
    clock = VirtualClock()
    async with queue_on(store, clock) as queue:
        # tick: the first failure retries after the backoff, the last one dead-letters.
        job_id = await queue.enqueue(Q, {"raise": True}, max_attempts=2)
        first = await queue.tick(Q, handler)
        clock.advance(1)  # the default backoff after a first failure
        second = await queue.tick(Q, handler)
        [dead] = await queue.dlq_list(Q)

        # consume: the same consumer runs a raising job, then an ordinary one.
        await queue.enqueue(Q, {"raise": True}, max_attempts=1)
        await queue.enqueue(Q, {"raise": False})
        consumer = await queue.consume(Q, handler, poll_interval=0.05)
        with anyio.fail_after(HANG_GUARD):
            while consumer.stats.succeeded + consumer.stats.failed < 2:  # noqa: ASYNC110
                await anyio.sleep(0.005)
        consumer.cancel()
        await consumer.wait_stopped()
        size, dead_count = await queue.size(Q), await queue.dlq_size(Q)

    reliability_tally.add(
        "hostile: handler raises a BaseException",
        where(store, anyio_backend),
        enqueued=3,
        completed=consumer.stats.succeeded,
        failed_attempts=first.failed + second.failed + consumer.stats.failed,
    )
    assert (first.leased, first.failed, first.moved_to_dlq) == (1, 1, 0)
    assert (second.leased, second.failed, second.moved_to_dlq) == (1, 1, 1)
    assert dead.job_id == job_id
    assert dead.attempts == 2
    assert dead.last_error is not None
    assert dead.last_error.startswith(name)
    assert (consumer.stats.succeeded, consumer.stats.failed) == (1, 1)
    assert (size, dead_count) == (0, 2)


# -- swallowing cancellation at shutdown -------------------------------------------------------
def swallowing_handler(overrun: float, started: anyio.Event, swallowed: list[int]) -> Any:
    """A handler that catches every cancellation and keeps working ``overrun`` real seconds
    past the first one, then claims success."""

    async def handler(job: Job, ctx: JobContext) -> str:
        started.set()
        cancelled_at: float | None = None
        while cancelled_at is None or time.monotonic() - cancelled_at < overrun:
            try:
                await anyio.sleep(0.01)
            except anyio.get_cancelled_exc_class():
                swallowed[0] += 1
                if cancelled_at is None:
                    cancelled_at = time.monotonic()
        return "claimed"

    return handler


async def test_a_handler_swallowing_cancellation_within_the_grace_ends_done_and_shutdown_returns(
    store: dict[str, Any], anyio_backend: str, reliability_tally: Tally
) -> None:
    started = anyio.Event()
    swallowed = [0]
    queue = queue_on(store)
    # One scope around start() and shutdown(): the queue's task group must exit in the scope
    # it was entered in.
    with anyio.fail_after(HANG_GUARD):
        await queue.start()
        await queue.enqueue(Q, {"n": 1})
        consumer = await queue.consume(
            Q, swallowing_handler(0.3, started, swallowed), poll_interval=0.05
        )
        await started.wait()
        began = time.monotonic()
        await queue.shutdown(timeout=0.2)
        took = time.monotonic() - began

    async with queue_on(store) as again:
        size = await again.size(Q)

    reliability_tally.add(
        "hostile: handler swallows cancellation (within grace)",
        where(store, anyio_backend),
        enqueued=1,
        completed=consumer.stats.succeeded,
        recovery_seconds=took,
    )
    assert swallowed[0] >= 1, "the shutdown deadline cancelled the handler"
    assert consumer.stopped
    # It refused to stop and returned: its job really ran, and it is recorded as done.
    assert (consumer.stats.succeeded, consumer.stats.failed, consumer.stats.released) == (1, 0, 0)
    assert size == 0


async def test_a_handler_swallowing_cancellation_past_the_grace_leaves_its_job_to_the_lease(
    store: dict[str, Any],
    anyio_backend: str,
    monkeypatch: pytest.MonkeyPatch,
    reliability_tally: Tally,
) -> None:
    # The grace after the deadline is 5 s; a shorter one keeps the test short.  The fault is
    # the same: the handler is still running when the grace is over.
    monkeypatch.setattr(blamequeue._queue, "_ABORT_GRACE", 0.2)
    clock = VirtualClock()
    started = anyio.Event()
    swallowed = [0]
    lease = 30.0
    queue = queue_on(store, clock)
    with anyio.fail_after(HANG_GUARD):
        await queue.start()
        job_id = await queue.enqueue(Q, {"n": 1})
        await queue.consume(
            Q, swallowing_handler(1.2, started, swallowed), lease=lease, poll_interval=0.05
        )
        await started.wait()
        began = time.monotonic()
        await queue.shutdown(timeout=0.2)
        took = time.monotonic() - began

    # Its claimed success was never recorded (nothing was left to record it): the job is
    # still leased, fenced, and comes back when the lease runs out.
    seen: list[tuple[str, int]] = []

    async def again_handler(job: Job, ctx: JobContext) -> None:
        seen.append((job.id, job.attempts))

    async with queue_on(store, clock) as again:
        before = await again.tick(Q, again_handler)
        clock.advance(lease + 1)
        after = await again.tick(Q, again_handler)
        size = await again.size(Q)

    reliability_tally.add(
        "hostile: handler swallows cancellation (past grace)",
        where(store, anyio_backend),
        enqueued=1,
        completed=after.succeeded,
        run_more_than_once=1,
        recovery_seconds=took,
    )
    assert swallowed[0] >= 1
    assert before.leased == 0, "still fenced by the first lease"
    assert after.succeeded == 1
    assert seen == [(job_id, 2)]
    assert size == 0


# -- unserialisable results -----------------------------------------------------------------------
def _circular() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


RESULTS: dict[str, Callable[[], Any]] = {
    "object": object,
    "set": lambda: {1, 2},
    "nan": lambda: math.nan,
    "circular": _circular,
    "bytes": lambda: b"\xff\x00",
    "lock": threading.Lock,
    "generator": lambda: (n for n in range(3)),
    "function": lambda: functools.partial(print),
}


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_handler_returning_what_json_cannot_hold_still_completes_its_job(
    store: dict[str, Any], anyio_backend: str, kind: str, reliability_tally: Tally
) -> None:
    async def return_async(job: Job, ctx: JobContext) -> Any:
        return RESULTS[job.payload["result"]]()

    def return_sync(job: Job, ctx: Any) -> Any:
        return RESULTS[job.payload["result"]]()

    handler: Any = return_async if kind == "async" else return_sync
    async with queue_on(store) as queue:
        await queue.enqueue_many(Q, [{"result": name} for name in RESULTS])
        ticked = await queue.tick(Q, handler, max=len(RESULTS))
        await queue.enqueue_many(Q, [{"result": name} for name in RESULTS])
        consumer = await queue.consume(Q, handler, concurrency=4, poll_interval=0.05)
        with anyio.fail_after(HANG_GUARD):
            while consumer.stats.succeeded + consumer.stats.failed < len(RESULTS):  # noqa: ASYNC110
                await anyio.sleep(0.005)
        consumer.cancel()
        await consumer.wait_stopped()
        size, dead = await queue.size(Q), await queue.dlq_size(Q)

    reliability_tally.add(
        "hostile: handler returns an unserialisable result",
        where(store, anyio_backend),
        enqueued=2 * len(RESULTS),
        completed=ticked.succeeded + consumer.stats.succeeded,
    )
    assert (ticked.succeeded, ticked.failed) == (len(RESULTS), 0)
    assert (consumer.stats.succeeded, consumer.stats.failed) == (len(RESULTS), 0)
    assert (size, dead) == (0, 0)


# -- a thread blocked past the shutdown deadline ---------------------------------------------------
async def test_a_sync_handler_blocked_past_the_shutdown_deadline_is_abandoned_and_its_job_released(
    store: dict[str, Any], anyio_backend: str, reliability_tally: Tally
) -> None:
    clock = VirtualClock()
    started = threading.Event()
    gate = threading.Event()
    returned = threading.Event()

    def blocked(job: Job, ctx: Any) -> str:
        started.set()
        gate.wait()
        returned.set()
        return "late"

    queue = queue_on(store, clock)
    with anyio.fail_after(HANG_GUARD):
        await queue.start()
        job_id = await queue.enqueue(Q, {"n": 1})
        consumer = await queue.consume(Q, blocked, poll_interval=0.05)
        await anyio.to_thread.run_sync(started.wait)
        began = time.monotonic()
        await queue.shutdown(timeout=0.2)
        took = time.monotonic() - began
    # The abandoned thread finishes only now; its result reaches nobody.
    gate.set()
    with anyio.fail_after(HANG_GUARD):
        await anyio.to_thread.run_sync(returned.wait)

    seen: list[tuple[str, int]] = []

    async def again_handler(job: Job, ctx: JobContext) -> None:
        seen.append((job.id, job.attempts))

    async with queue_on(store, clock) as again:
        pending = await again.size(Q)
        result = await again.tick(Q, again_handler)
        size = await again.size(Q)

    reliability_tally.add(
        "hostile: sync handler blocked past the shutdown deadline",
        where(store, anyio_backend),
        enqueued=1,
        completed=result.succeeded,
        run_more_than_once=1,
        recovery_seconds=took,
    )
    assert (consumer.stats.released, consumer.stats.succeeded, consumer.stats.failed) == (1, 0, 0)
    assert pending == 1, "released back to pending at once, not held until its lease ran out"
    assert seen == [(job_id, 1)], "the interrupted attempt was given back"
    assert result.succeeded == 1
    assert size == 0
