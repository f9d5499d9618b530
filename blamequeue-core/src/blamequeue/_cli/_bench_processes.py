"""``blamequeue bench --processes N ...``: processed jobs/s with N worker processes draining one
queue that the bench filled, beside the figure with one.

Each worker is a process of its own with one consumer at the bench's ``--concurrency`` and a
no-op handler.  The bench starts them all, waits until every one has opened its queue, then
tells them to start at once: what is timed is from that word to the last handler call of the
last job (across the processes, on one clock, ``time.time()``), so interpreter start-up and
connecting are not counted, and leasing, settling and the contention between the processes are.

The backend's config, sealing key included, goes to a worker on its standard input, never on
its command line (which any user of the machine can read).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.buffered import BufferedByteReceiveStream

from blamequeue import Job, Queue

from ._running import run_on_loop

__all__ = ["drain_in_processes", "process_worker"]

_WORKER = """
import sys
from blamequeue._cli._bench_processes import process_worker
process_worker(sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""
#: How often a worker says how many jobs it has run.
_REPORT_EVERY = 0.05
#: Seconds a worker may take to open its queue, or to stop once told to.
_START_DEADLINE = 60.0


def process_worker(loop: str, queue_name: str, concurrency: int) -> None:
    """Run in a worker process: read the backend's config (a line of JSON) from standard input,
    open the queue, say ``ready``; on the next line consume ``queue_name``, printing
    ``{"done": N, "at": T}`` (jobs run, time of the last) as it changes, until standard input
    closes."""
    config = json.loads(sys.stdin.readline())
    done = 0
    last_at = 0.0

    async def noop(job: Job, ctx: Any) -> None:
        nonlocal done, last_at
        done += 1
        last_at = time.time()

    async def report() -> None:
        told = -1
        while True:
            if done != told:
                told = done
                print(json.dumps({"done": done, "at": last_at}), flush=True)
            await anyio.sleep(_REPORT_EVERY)

    async def main() -> None:
        queue = Queue(backends={"bench": config})
        async with queue:
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            await queue.consume(queue_name, noop, concurrency=concurrency)
            async with anyio.create_task_group() as tg:
                tg.start_soon(report)
                await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
                tg.cancel_scope.cancel()
            await queue.shutdown()

    run_on_loop(main, loop)


async def drain_in_processes(
    config: dict[str, Any],
    loop: str,
    queue_name: str,
    *,
    processes: int,
    jobs: int,
    concurrency: int,
    progress: Callable[[int], None],
) -> float:
    """Seconds for ``processes`` worker processes to run the ``jobs`` jobs waiting in
    ``queue_name``; ``progress(n)`` is told the jobs run so far."""
    command = [sys.executable, "-c", _WORKER, loop, queue_name, str(concurrency)]
    async with contextlib.AsyncExitStack() as stack:
        workers: list[anyio.abc.Process] = []
        for _ in range(processes):
            worker = await anyio.open_process(command, stderr=None)  # its errors: on ours
            stack.push_async_callback(_stop, worker)
            workers.append(worker)
        lines = [BufferedByteReceiveStream(_stdout(worker)) for worker in workers]
        configured = json.dumps(config).encode() + b"\n"
        for worker in workers:
            await _stdin(worker).send(configured)
        with anyio.fail_after(_START_DEADLINE):
            for reader in lines:
                await _expect(reader, b"ready")
        done = [0] * processes
        last_at = [0.0] * processes
        finished = anyio.Event()

        async def follow(index: int, reader: BufferedByteReceiveStream) -> None:
            while True:
                report = json.loads(await reader.receive_until(b"\n", 4096))
                done[index], last_at[index] = report["done"], report["at"]
                progress(sum(done))
                if sum(done) >= jobs:
                    finished.set()

        started = time.time()
        for worker in workers:
            await _stdin(worker).send(b"go\n")
        async with anyio.create_task_group() as tg:
            for index, reader in enumerate(lines):
                tg.start_soon(follow, index, reader)
            await finished.wait()
            tg.cancel_scope.cancel()
    return max(last_at) - started


async def _expect(reader: BufferedByteReceiveStream, word: bytes) -> None:
    line = await reader.receive_until(b"\n", 4096)
    if line.strip() != word:
        raise RuntimeError(f"a bench worker process said {line!r} instead of {word!r}")


def _stdin(worker: anyio.abc.Process) -> anyio.abc.ByteSendStream:
    assert worker.stdin is not None
    return worker.stdin


def _stdout(worker: anyio.abc.Process) -> anyio.abc.ByteReceiveStream:
    assert worker.stdout is not None
    return worker.stdout


async def _stop(worker: anyio.abc.Process) -> None:
    """Close the worker's standard input (it shuts its queue down and exits); kill it if it has
    not exited in time."""
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await _stdin(worker).aclose()
        with anyio.move_on_after(_START_DEADLINE) as waited:
            await worker.wait()
        if waited.cancelled_caught:
            worker.kill()
            await worker.wait()
        await worker.aclose()
