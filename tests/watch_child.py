"""A producer or a worker process for the cross-process ``Queue.watch`` tests (run as a
script, not collected by pytest).

usage: watch_child.py produce CONFIG_JSON QUEUE
         enqueues "ok", "flaky" (2 attempts) and "doomed" (1 attempt); prints their ids (JSON)
       watch_child.py work CONFIG_JSON QUEUE COUNT
         ticks QUEUE until COUNT jobs ended (done or dead); "flaky" fails its first attempt,
         "doomed" every one
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from blamequeue import Job, JobContext, Queue


async def handler(job: Job, ctx: JobContext) -> None:
    if job.payload == "doomed" or (job.payload == "flaky" and job.attempts == 1):
        raise ValueError(job.payload)


async def produce(config: dict[str, Any], queue_name: str) -> None:
    async with Queue(backends={"producer": config}, sweep_interval=0) as queue:
        ids = {
            "ok": await queue.enqueue(queue_name, "ok"),
            "flaky": await queue.enqueue(queue_name, "flaky", max_attempts=2),
            "doomed": await queue.enqueue(queue_name, "doomed", max_attempts=1),
        }
    print(json.dumps(ids), flush=True)


async def work(config: dict[str, Any], queue_name: str, count: int) -> None:
    ended = 0
    async with Queue(backends={"worker": config}, sweep_interval=0) as queue:
        with anyio.fail_after(30):
            while ended < count:
                result = await queue.tick(queue_name, handler, max=10)
                ended += result.succeeded + result.moved_to_dlq
                if not result.leased:
                    await anyio.sleep(0.01)


if __name__ == "__main__":
    role, config, name = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    if role == "produce":
        anyio.run(produce, config, name)
    else:
        anyio.run(work, config, name, int(sys.argv[4]))
