"""A worker process for the cross-process cancel tests (run as a script, not collected).

usage: cancel_worker.py CONFIG_JSON QUEUE OUT LOOP

Consumes QUEUE on a one-backend queue built from CONFIG_JSON, on event loop LOOP (asyncio or
trio), with a short lease (so the heartbeat runs every 0.2 s).  Each handler appends
``started <job id>`` to OUT and waits; when its worker cancels it, ``cancelled <job id>``.
The test kills the process when it is done with it.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import anyio

from blamequeue import Job, JobContext, Queue

LEASE = 0.6


async def serve(config: dict[str, object], queue_name: str, out: Path) -> None:
    def note(line: str) -> None:
        with out.open("a") as file:
            file.write(line + "\n")

    async def handler(job: Job, ctx: JobContext) -> None:
        note(f"started {job.id}")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            note(f"cancelled {job.id}")
            raise

    queue = Queue(backends={"default": config}, sweep_interval=0)
    async with queue:
        await queue.consume(queue_name, handler, lease=LEASE, poll_interval=0.05)
        await anyio.sleep_forever()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    config_json, queue_name, out, loop = sys.argv[1:5]
    anyio.run(serve, json.loads(config_json), queue_name, Path(out), backend=loop)


if __name__ == "__main__":
    main()
