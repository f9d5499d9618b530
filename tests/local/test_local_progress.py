"""Results and progress events across processes on one SQLite file (SPEC §10)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from blamequeue import Job, JobContext, JobEvent, Queue
from blamequeue_local import connect
from blamequeue_testing import VirtualClock
from cross_process_events import run_elsewhere_and_watch
from cross_process_watch import EXPECTED, watch_a_producer_and_a_worker

pytestmark = pytest.mark.anyio


async def test_a_subscriber_sees_another_processs_progress_and_result(tmp_path: Path) -> None:
    config = {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    events, result, pid = await run_elsewhere_and_watch(config)
    assert [(e.kind, e.percent, e.data) for e in events] == [
        ("progress", 30.0, {"step": 1}),
        ("progress", 70.0, {"step": 2}),
        ("finished", None, None),
    ]
    assert events[-1].state == "done"
    assert result == {"pid": pid}


async def test_a_store_with_no_file_to_watch_is_polled_on_the_queue_clock() -> None:
    connection = connect(":memory:")
    clock = VirtualClock()
    queue = Queue(
        backends={"mem": {"protocol": "local", "store": connection, "seal": False}},
        clock=clock,
        sweep_interval=0,
    )
    try:
        async with queue:
            job_id = await queue.enqueue("q", 20)
            values: list[object] = []
            events: list[JobEvent] = []

            async def handler(job: Job, ctx: JobContext) -> int:
                await ctx.progress(50)
                return int(job.payload) + 1

            async def wait() -> None:
                values.append(await queue.result(job_id, timeout=60))

            async def listen() -> None:
                async with queue.subscribe(job_id) as subscription:
                    events.extend([event async for event in subscription])

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait)
                    tg.start_soon(listen)
                    await anyio.sleep(0.05)
                    await queue.tick("q", handler)
                    while not (values and events):
                        await clock.advance_and_settle(1.0)  # the slowest poll
                        await anyio.sleep(0.01)
            assert values == [21]
            assert [(e.kind, e.percent) for e in events] == [("progress", 50.0), ("finished", None)]
    finally:
        connection.close()


async def test_a_watch_sees_a_producer_and_a_worker_process_in_order_per_job(
    tmp_path: Path,
) -> None:
    config = {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    assert await watch_a_producer_and_a_worker(config) == EXPECTED
