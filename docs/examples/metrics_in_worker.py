"""A worker process that also serves its queue's figures to Prometheus, at
http://127.0.0.1:9478/metrics: the duration histogram and the totals include what this
process runs the moment it settles, with no flush to wait for.  Run it with
``python metrics_in_worker.py`` (Ctrl-C stops it)."""

from __future__ import annotations

import functools

import anyio
from hypercorn.asyncio import serve
from hypercorn.config import Config

import blamequeue
from blamequeue import Job, JobContext, Queue


async def send_email(job: Job, ctx: JobContext) -> None:
    await anyio.sleep(0.05)  # the work


async def main(path: str = "jobs.db", port: int = 9478, stop: anyio.Event | None = None) -> None:
    queue = Queue(backends={"primary": {"protocol": "local", "path": path}})
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    stopped = stop or anyio.Event()  # set it to stop serving (or press Ctrl-C)
    async with queue:
        await queue.consume("emails", send_email, concurrency=4)
        await queue.enqueue("emails", {"to": "ada@example.com"})
        app = blamequeue.metrics_app(queue)
        async with anyio.create_task_group() as tg:
            # In a task of its own, not in the one that started the queue.
            tg.start_soon(functools.partial(serve, app, config, shutdown_trigger=stopped.wait))


if __name__ == "__main__":
    anyio.run(main)
