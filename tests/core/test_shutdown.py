"""Shutdown paths the conformance suite does not reach: cancellation from outside."""

from __future__ import annotations

import anyio
import pytest

from blamequeue import Job, JobContext, Queue

pytestmark = pytest.mark.anyio


async def test_cancelling_the_body_of_async_with_queue_still_shuts_down_cleanly() -> None:
    started = anyio.Event()

    async def handler(job: Job, ctx: JobContext) -> None:
        started.set()
        await anyio.sleep_forever()

    queue = Queue(backends={"m": {"protocol": "memory", "namespace": "outer-cancel"}})
    with anyio.move_on_after(5) as outer:
        async with queue:
            await queue.enqueue("q", {"n": 1})
            await queue.consume("q", handler)
            await started.wait()
            outer.cancel()
            await anyio.sleep_forever()
    assert outer.cancel_called

    # The running job was handed back, not lost: a new queue on the same store runs it.
    again = Queue(backends={"m": {"protocol": "memory", "namespace": "outer-cancel"}})
    async with again:
        seen: list[int] = []

        async def record(job: Job, ctx: JobContext) -> None:
            seen.append(job.payload["n"])

        result = await again.tick("q", record)
        assert (result.succeeded, seen) == (1, [1])
