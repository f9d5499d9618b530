"""The check both cross-process ``Queue.watch`` tests (local, redis) run: this process
watches, a producer process enqueues and a worker process runs the jobs, both started at once,
so either one's events may reach the store first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from blamequeue import Queue, QueueEvent

CHILD = Path(__file__).with_name("watch_child.py")
DEADLINE = 30.0

#: Each job's events, in the order its lifecycle raises them: (name, attempts).
EXPECTED = {
    "ok": [("job.added", None), ("job.processing", 1), ("job.completed", 1)],
    "flaky": [
        ("job.added", None),
        ("job.processing", 1),
        ("job.failed", 1),
        ("job.retrying", 1),
        ("job.processing", 2),
        ("job.completed", 2),
    ],
    "doomed": [("job.added", None), ("job.processing", 1), ("job.failed", 1), ("job.dead", 1)],
}


async def watch_a_producer_and_a_worker(config: dict[str, Any]) -> dict[str, list[Any]]:
    """Per payload, the ``(name, attempts)`` of every event the watch saw of its job."""
    config = {**config, "backoff": [0]}  # the flaky job's retry is due at once
    seen: list[QueueEvent] = []
    total = sum(len(events) for events in EXPECTED.values())
    async with Queue(backends={"watcher": config}, sweep_interval=0) as queue:
        with anyio.fail_after(DEADLINE):
            async with queue.watch("orders") as events, anyio.create_task_group() as tg:
                worker = [sys.executable, str(CHILD), "work", json.dumps(config), "orders", "3"]
                tg.start_soon(lambda: anyio.run_process(worker, stdout=subprocess.DEVNULL))
                producer = await anyio.run_process(
                    [sys.executable, str(CHILD), "produce", json.dumps(config), "orders"]
                )
                async for event in events:
                    if event.job_id is None:  # queue.drained, whenever the worker ran dry
                        continue
                    seen.append(event)
                    if len(seen) == total:
                        break
    ids = json.loads(producer.stdout)
    payload_of = {job_id: payload for payload, job_id in ids.items()}
    jobs: dict[str, list[Any]] = {payload: [] for payload in ids}
    for event in seen:
        jobs[payload_of[event.job_id or ""]].append((event.name, event.data.get("attempts")))
    return jobs
