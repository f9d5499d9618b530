"""The check both cross-process tests (local, redis) run: a subscriber and a result waiter in
this process, the job run by a worker in another one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from blamequeue import JobEvent, Queue

CHILD = Path(__file__).with_name("progress_child.py")
DEADLINE = 30.0


async def run_elsewhere_and_watch(config: dict[str, Any]) -> tuple[list[JobEvent], Any, int]:
    """Enqueue a job, subscribe, let a child process run it; the events seen, the result,
    and the child's pid."""
    async with Queue(backends={"parent": config}, sweep_interval=0) as queue:
        job_id = await queue.enqueue("reports", None)
        events: list[JobEvent] = []
        with anyio.fail_after(DEADLINE):
            async with queue.subscribe(job_id) as subscription:
                child = await anyio.open_process(
                    [sys.executable, str(CHILD), json.dumps(config), "reports"],
                    stdout=subprocess.DEVNULL,
                )
                async with child:
                    async for event in subscription:
                        events.append(event)
                    await child.wait()
            result = await queue.result(job_id, timeout=DEADLINE)
        assert child.returncode == 0
        return events, result, child.pid
