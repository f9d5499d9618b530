"""Cancel across processes on one Redis server: a handler running in another worker process is
cancelled by ``Queue.cancel`` in this one (the worker hears of it at its next heartbeat), and
the cancel script leaves no index entry behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis_helpers import config

from blamequeue import Queue
from cross_process_cancel import cancel_running_job_in_another_process

pytestmark = pytest.mark.anyio


async def test_cancel_stops_a_handler_running_in_another_process(
    redis_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    await cancel_running_job_in_another_process(config(redis_url), tmp_path, anyio_backend)


async def test_cancel_removes_the_job_from_every_pending_index(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async with Queue(backends={"r": config(redis_url)}, sweep_interval=0) as queue:
        due = await queue.enqueue("idx", "due")
        later = await queue.enqueue("idx", "later", delay=60)
        lifo = await queue.enqueue("idx", "lifo", lifo=True)
        assert await queue.cancel(due) is True
        assert await queue.cancel(later) is True
        assert await queue.cancel(lifo) is True
        # An emptied zset is deleted: no ready or delayed entry is left for the lease to skip.
        keys = set(redis_client.keys("*{idx}*"))
        assert not [key for key in keys if key.endswith((":ready", ":delayed"))]
        assert await queue.size("idx") == 0
        [counts] = await queue.queues()
        assert (counts.cancelled, counts.pending) == (3, 0)
