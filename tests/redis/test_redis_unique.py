"""Unique jobs on the redis backend beyond the conformance suite: several processes racing
on one key, and the key strings (hash tag, TTL, deleted with their job)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis_helpers import config

from blamequeue import Job, JobContext, Queue
from unique_processes import enqueue_from_processes

pytestmark = pytest.mark.anyio

_UNIQUE = "blamequeue:queue:{q}:unique:k"


def test_processes_racing_on_one_key_store_one_job_and_all_get_its_id(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ids = enqueue_from_processes(
        config(redis_url), "race", "only-once", tmp_path, processes=3, each=20
    )
    assert len(ids) == 60
    assert len(set(ids)) == 1
    assert redis_client.zcard("blamequeue:queue:{race}:st:pending") == 1
    assert redis_client.get("blamequeue:queue:{race}:unique:only-once") == ids[0]


async def test_the_key_string_carries_the_queue_hash_tag_and_unique_for_as_ttl(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async with Queue(backends={"r": config(redis_url)}) as queue:
        job_id = await queue.enqueue("q", 1, unique_key="k", unique_for=90)
    assert redis_client.get(_UNIQUE) == job_id
    assert 0 < redis_client.pttl(_UNIQUE) <= 90_000


async def test_without_unique_for_the_key_string_has_no_ttl_and_goes_with_its_job(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def succeed(job: Job, ctx: JobContext) -> None:
        pass

    # retain_done=0: a done job's hash is deleted at once, and its key string with it.
    async with Queue(backends={"r": config(redis_url, retain_done=0)}) as queue:
        await queue.enqueue("q", 1, unique_key="k")
        assert redis_client.pttl(_UNIQUE) == -1  # no expiry
        await queue.tick("q", succeed)
        assert redis_client.exists(_UNIQUE) == 0
        await queue.enqueue("q", 2, unique_key="k")
        await queue.purge("q")
        assert redis_client.exists(_UNIQUE) == 0
