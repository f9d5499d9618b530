"""A producer process for the unique-job atomicity tests (run as a script, not collected).

usage: unique_producer.py CONFIG_JSON QUEUE KEY GO OUT COUNT LOOP
  Opens a queue on the backend CONFIG_JSON, creates OUT.ready, waits until the file GO exists
  (so every process enqueues at the same moment), enqueues COUNT jobs at once from as many
  tasks, all with unique key KEY, and writes the ids it got back to OUT (JSON).
  LOOP: asyncio or trio.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread

from blamequeue import Queue


def wait_for_go(go: Path) -> None:
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.002)


async def produce(config: str, queue_name: str, key: str, go: Path, out: Path, count: int) -> None:
    ids: list[str] = []

    async def one(queue: Queue, n: int) -> None:
        ids.append(await queue.enqueue(queue_name, {"n": n}, unique_key=key))

    async with Queue(backends={"b": json.loads(config)}, sweep_interval=0) as queue:
        await anyio.Path(out.with_suffix(".ready")).touch()
        await anyio.to_thread.run_sync(wait_for_go, go)
        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, queue, n)
    await anyio.Path(out).write_text(json.dumps(ids))


def main() -> None:
    config, queue_name, key, go, out, count, loop = sys.argv[1:8]
    anyio.run(produce, config, queue_name, key, Path(go), Path(out), int(count), backend=loop)


if __name__ == "__main__":
    main()
