"""blamequeue's side of the side-by-side benchmark with Bee-Queue (run.py drives it; see
README.md), through blamequeue's public API only, with the defaults a user gets::

    BLAMEQUEUE_SEAL_KEYS=k1:<base64> python blamequeue_side.py enqueue-single N [--url URL]
    BLAMEQUEUE_SEAL_KEYS=k1:<base64> python blamequeue_side.py enqueue-bulk N [--url URL]
    BLAMEQUEUE_SEAL_KEYS=k1:<base64> python blamequeue_side.py process N [--url URL]

The Redis URL comes from ``--url``, else from ``BLAMEQUEUE_REDIS_URL``; the seal key from
``BLAMEQUEUE_SEAL_KEYS`` (``blamequeue keygen`` makes one), as a user gives it: sealing is on.
It prints one JSON line on stdout (the figure: jobs, seconds, jobs_per_s) and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import anyio

from blamequeue import Job, JobContext, Queue, QueueEvent

QUEUE = "bench"
CHUNK = 1000
CONCURRENCY = 50
MODES = ("enqueue-single", "enqueue-bulk", "process")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"N must be a positive integer, not {text}")
    return value


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("jobs", type=positive_int, metavar="N")
    parser.add_argument(
        "--url",
        default=os.environ.get("BLAMEQUEUE_REDIS_URL"),
        help="Redis server (default: $BLAMEQUEUE_REDIS_URL)",
    )
    parser.add_argument("--loop", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("no Redis URL: pass --url redis://HOST:PORT/DB or set BLAMEQUEUE_REDIS_URL")
    if not os.environ.get("BLAMEQUEUE_SEAL_KEYS"):
        parser.error("no seal key: set BLAMEQUEUE_SEAL_KEYS (`blamequeue keygen` makes one)")
    return args


async def enqueue_single(queue: Queue, jobs: int) -> float:
    started = time.perf_counter()
    for i in range(jobs):
        await queue.enqueue(QUEUE, {"i": i})
    return time.perf_counter() - started


async def enqueue_bulk(queue: Queue, jobs: int) -> float:
    started = time.perf_counter()
    for start in range(0, jobs, CHUNK):
        await queue.enqueue_many(QUEUE, [{"i": i} for i in range(start, min(jobs, start + CHUNK))])
    return time.perf_counter() - started


async def process(queue: Queue, jobs: int) -> float:
    """From the first job's start to the last job's completion (``job.completed``, raised once
    the job's success is recorded in Redis)."""
    first_start: float | None = None
    last_done = 0.0
    done = 0
    finished = anyio.Event()
    failure: list[str] = []

    async def noop(job: Job, ctx: JobContext) -> None:
        nonlocal first_start
        if first_start is None:
            first_start = time.perf_counter()

    def completed(event: QueueEvent) -> None:
        nonlocal done, last_done
        done += 1
        if done == jobs:
            last_done = time.perf_counter()
            finished.set()

    def failed(event: QueueEvent) -> None:
        failure.append(f"job {event.job_id} failed: {event.data.get('error')}")
        finished.set()

    queue.on("job.completed", completed)
    queue.on("job.failed", failed)
    await queue.consume(QUEUE, noop, concurrency=CONCURRENCY)
    await finished.wait()
    if failure:
        raise RuntimeError(failure[0])
    assert first_start is not None
    return last_done - first_start


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    run = {"enqueue-single": enqueue_single, "enqueue-bulk": enqueue_bulk, "process": process}
    # Sealing: the key is BLAMEQUEUE_SEAL_KEYS, which Queue() reads.
    queue = Queue(backends={"redis": {"protocol": "redis", "url": args.url}})
    async with queue:
        seconds = await run[args.mode](queue, args.jobs)
    return {
        "jobs": args.jobs,
        "seconds": round(seconds, 6),
        "jobs_per_s": round(args.jobs / seconds, 1),
    }


def main(argv: list[str]) -> None:
    args = parse(argv)

    async def run() -> dict[str, Any]:
        return await measure(args)

    figure = anyio.run(run, backend=args.loop)
    print(json.dumps(figure), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
