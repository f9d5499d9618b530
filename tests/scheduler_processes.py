"""Runs scheduler loops in several processes against one backend and checks every slot fired
exactly once (shared by the local and redis tests; not a test module).

Each child (``python scheduler_processes.py CONFIG LOOP SECONDS``) declares a schedule firing
every second and runs ``Queue.run_scheduler`` for SECONDS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from blamequeue import Queue
from blamequeue._records import decode_value

QUEUE = "scheduled"


def _queue(config: Mapping[str, Any]) -> Queue:
    queue = Queue(backends={"b": dict(config)}, sweep_interval=0)

    @queue.task(name="Beat", queue=QUEUE)
    async def beat(payload: Any, ctx: Any) -> None:
        pass

    queue.schedule("* * * * * *", "Beat", name="every-second")
    return queue


async def _child(config: Mapping[str, Any], seconds: float) -> None:
    async with _queue(config) as queue:
        with anyio.move_on_after(seconds):
            await queue.run_scheduler()


def run_schedulers(
    config: Mapping[str, Any], workdir: Path, *, processes: int, seconds: float
) -> tuple[list[float], int]:
    """Run ``processes`` schedulers (alternately asyncio and trio) for ``seconds``; returns
    the fired slots (from the claims, sorted) and how many jobs the queue holds."""
    children = []
    for n in range(processes):
        log = (workdir / f"scheduler-{n}.log").open("wb")
        args = [json.dumps(dict(config)), ("asyncio", "trio")[n % 2], str(seconds)]
        children.append(subprocess.Popen([sys.executable, __file__, *args], stdout=log, stderr=log))
        log.close()
    try:
        for n, child in enumerate(children):
            assert child.wait(timeout=60) == 0, (workdir / f"scheduler-{n}.log").read_text()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    async def read() -> tuple[list[float], int]:
        async with Queue(backends={"b": dict(config)}, sweep_interval=0) as queue:
            claims = [decode_value(r) for r in await queue.records().list("schedule-slot")]
            assert all(claim["state"] == "enqueued" for claim in claims), claims
            job_ids = {claim["job_id"] for claim in claims}
            assert len(job_ids) == len(claims)
            for job_id in job_ids:
                assert await queue.get_job(job_id) is not None
            return sorted(float(claim["slot"]) for claim in claims), await queue.size(QUEUE)

    return anyio.run(read)


if __name__ == "__main__":
    anyio.run(_child, json.loads(sys.argv[1]), float(sys.argv[3]), backend=sys.argv[2])
