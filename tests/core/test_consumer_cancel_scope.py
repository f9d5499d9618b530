"""A worker runs its jobs one after another in one cancel scope: cancelling the running job
must stop that job only, whether its handler ends on the cancellation or swallows it."""

from __future__ import annotations

import anyio
import pytest

from blamequeue import Job, JobContext, Queue

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("swallows", [False, True], ids=["ends", "swallows"])
async def test_the_job_after_a_cancelled_one_runs_on_the_same_worker(swallows: bool) -> None:
    started, cancelled, finished = anyio.Event(), anyio.Event(), anyio.Event()
    ran: list[str] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        if job.payload == "first":
            started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.set()
                if not swallows:
                    raise
            return
        ran.append(job.payload)
        # Checkpoints: a scope left cancelled by the job before would stop this one here (and
        # hand it back to run again).
        await anyio.sleep(0.01)
        await anyio.sleep(0.01)
        finished.set()

    queue = Queue(backends={"m": {"protocol": "memory", "namespace": f"scope-{swallows}"}})
    async with queue:
        first = await queue.enqueue("q", "first")
        # One worker, and heartbeats every 0.1 s: the cancel reaches the handler at once.
        consumer = await queue.consume("q", handler, concurrency=1, lease=0.3)
        with anyio.fail_after(10):
            await started.wait()
            second = await queue.enqueue("q", "second")
            assert await queue.cancel(first)
            await cancelled.wait()
            await finished.wait()
        consumer.cancel()
        await consumer.wait_stopped()
        assert ran == ["second"]
        assert consumer.stats.stale == 1
        infos = [await queue.job_info(first), await queue.job_info(second)]
        assert [info.state if info else None for info in infos] == ["cancelled", "done"]
