"""Someone who can write the Redis keys (SPEC §6 "A seal is bound to its place"): a sealed
payload copied into another job or another queue's job, or a task name rewritten in a job's
hash, does not run: the job goes to the DLQ saying it was tampered with."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis_helpers import config

from blamequeue import Job, JobContext, Queue

pytestmark = pytest.mark.anyio

SECRET = "card-4111-tamper"


def job_key(client: redis.Redis, job_id: str) -> str:
    [key] = client.keys(f"*job:{job_id}")
    return str(key)


def record_into(seen: list[Any]) -> Any:
    async def record(job: Job, ctx: JobContext) -> None:
        seen.append(job.payload)

    return record


@pytest.mark.parametrize("other_queue", ["tq", "elsewhere"])
async def test_a_payload_copied_into_another_job_is_dead_lettered_as_tampered(
    redis_url: str, redis_client: redis.Redis, other_queue: str
) -> None:
    async with Queue(backends={"r": config(redis_url)}, sweep_interval=0) as queue:
        source = await queue.enqueue("tq", {"card": SECRET})
        target = await queue.enqueue(other_queue, {"harmless": True})
        stolen = redis_client.hget(job_key(redis_client, source), "payload")
        redis_client.hset(job_key(redis_client, target), "payload", str(stolen))
        seen: list[Any] = []
        result = await queue.tick(other_queue, record_into(seen))
        assert result.moved_to_dlq == 1
        # The source job itself still runs where it belongs; the copy never does.
        assert seen == ([{"card": SECRET}] if other_queue == "tq" else [])
        [dead] = await queue.dlq_list(other_queue)
        assert dead.job_id == target
        assert dead.last_error is not None
        assert "tampered" in dead.last_error
        assert SECRET not in dead.last_error


async def test_a_task_name_rewritten_in_the_job_hash_does_not_run(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async with Queue(backends={"r": config(redis_url)}, sweep_interval=0) as queue:
        ran: list[str] = []

        @queue.task(queue="tq", name="harmless")
        async def harmless(payload: Any, ctx: JobContext) -> None:
            ran.append("harmless")

        @queue.task(queue="tq", name="dangerous")
        async def dangerous(payload: Any, ctx: JobContext) -> None:
            ran.append("dangerous")

        job_id = await queue.job("harmless", {}).with_context(user=SECRET).dispatch()
        key = job_key(redis_client, job_id)
        meta = str(redis_client.hget(key, "meta"))
        assert SECRET not in meta
        assert '"harmless"' in meta
        redis_client.hset(key, "meta", meta.replace('"harmless"', '"dangerous"'))
        result = await queue.tick("tq", queue.tasks)
        assert (result.moved_to_dlq, ran) == (1, [])
        [dead] = await queue.dlq_list("tq")
        assert dead.last_error is not None
        assert "tampered" in dead.last_error
