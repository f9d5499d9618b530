"""Pause and resume across processes on one SQLite file: a worker in another process stops
leasing once this one pauses the queue (within the documented second), and runs the waiting
job after resume."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from blamequeue import Queue
from blamequeue._pause import PAUSE_CHECK

pytestmark = pytest.mark.anyio

_WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import anyio
    from blamequeue import Queue

    db, ran, stop, backend = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]

    async def handler(job, ctx):
        with ran.open("a") as out:
            out.write(f"{job.payload}\\n")

    async def main():
        async with Queue(backends={"l": {"protocol": "local", "path": db}}) as queue:
            await queue.consume("jobs", handler, poll_interval=0.05)
            print("ready", flush=True)
            while not stop.exists():
                await anyio.sleep(0.05)

    anyio.run(main, backend=backend)
    """
)


def _ran(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def _until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(400):  # 20 s: a safety net, not a timing assertion
        if predicate():
            return
        await anyio.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


async def test_pause_in_one_process_stops_a_worker_in_another(
    tmp_path: Path, anyio_backend: str
) -> None:
    db, ran, stop = tmp_path / "jobs.db", tmp_path / "ran.txt", tmp_path / "stop"
    other = "trio" if anyio_backend == "asyncio" else "asyncio"  # the worker on the other loop
    async with Queue(backends={"l": {"protocol": "local", "path": str(db)}}) as queue:
        await queue.enqueue("jobs", "before")
        worker = await anyio.open_process(
            [sys.executable, "-c", _WORKER, str(db), str(ran), str(stop), other]
        )
        try:
            await _until(lambda: _ran(ran) == ["before"], "the worker to run the first job")
            assert await queue.pause("jobs")
            # The worker trusts its last read of the flag for PAUSE_CHECK seconds at most.
            await anyio.sleep(PAUSE_CHECK * 1.5)
            await queue.enqueue("jobs", "paused")
            await anyio.sleep(PAUSE_CHECK * 1.5)  # long enough for a running worker to lease
            assert _ran(ran) == ["before"]
            assert await queue.size("jobs") == 1
            assert await queue.resume("jobs")
            await _until(lambda: _ran(ran) == ["before", "paused"], "the job after resume")
        finally:
            stop.touch()
            with anyio.fail_after(20):
                await worker.wait()
            await worker.aclose()
        assert worker.returncode == 0
