"""A worker process for the multi-process tests (run as a script, not collected by pytest).

usage: mp_worker.py DB QUEUE OUT MODE
  drain: consume until the queue is empty, then write the ids it ran to OUT (JSON)
  hang:  consume; each handler writes its job id to OUT and then hangs (the test kills us)
"""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import sys
from pathlib import Path

import anyio

from blamequeue import Job, JobContext, Queue


async def drain(db: str, queue_name: str, out: Path) -> None:
    ran: list[str] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        ran.append(job.id)

    queue = Queue(backends={"local": {"protocol": "local", "path": db}}, sweep_interval=0)
    async with queue:
        await queue.consume(queue_name, handler, concurrency=20, poll_interval=0.05)
        empty_polls = 0
        while empty_polls < 3:  # size counts inflight, so 0 means every job settled
            await anyio.sleep(0.05)
            empty_polls = empty_polls + 1 if await queue.size(queue_name) == 0 else 0
    await anyio.Path(out).write_text(json.dumps(ran))


async def hang(db: str, queue_name: str, out: Path) -> None:
    async def handler(job: Job, ctx: JobContext) -> None:
        await anyio.Path(out).write_text(job.id)
        await anyio.sleep_forever()

    queue = Queue(backends={"local": {"protocol": "local", "path": db}}, sweep_interval=0)
    async with queue:
        await queue.consume(queue_name, handler, lease=30.0, poll_interval=0.05)
        await anyio.sleep_forever()


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # a hung worker can be asked for its stacks
    logging.basicConfig(level=logging.WARNING)
    db, queue_name, out, mode = sys.argv[1:5]
    runner = {"drain": drain, "hang": hang}[mode]
    anyio.run(runner, db, queue_name, Path(out))


if __name__ == "__main__":
    main()
