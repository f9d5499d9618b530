"""Job edits on one Redis server: each edit script files the job where the lease, the sweep and
inspection look for it (no stale entry in ``ready``, ``delayed`` or a finished state's zset),
and a job an edit makes due wakes an idle consumer of another queue object (its own
connections) through the queue's signal list, as an enqueue would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest
import redis
from redis_helpers import config

from blamequeue import Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

SAFETY_NET = 10.0  # real seconds before a wait is declared hung (never reached when it works)
BASE = "blamequeue:queue:{ed}:"


def filed(client: redis.Redis, job_id: str) -> dict[str, object]:
    """Where the job is filed: its ``ready`` score (or None), its ``delayed`` score (or None),
    and the state zsets (``st:<state>``) holding it."""
    ready = [
        score
        for member, score in client.zrange(BASE + "ready", 0, -1, withscores=True)
        if member.endswith(job_id)
    ]
    states = sorted(
        key.removeprefix(BASE + "st:")
        for key in client.keys(BASE + "st:*")
        if client.zscore(key, job_id) is not None
    )
    return {
        "ready": ready[0] if ready else None,
        "delayed": client.zscore(BASE + "delayed", job_id),
        "states": states,
    }


async def noop(job: Job, ctx: JobContext) -> None:
    pass


async def test_edits_of_a_pending_job_move_it_between_ready_and_delayed(
    redis_url: str, redis_client: redis.Redis
) -> None:
    clock = VirtualClock()
    async with Queue(backends={"r": config(redis_url)}, clock=clock, sweep_interval=0) as q:
        job_id = await q.enqueue("ed", "x")
        now = clock.now()
        assert filed(redis_client, job_id) == {"ready": 0, "delayed": None, "states": ["pending"]}
        assert await q.change_delay(job_id, 60) is True
        assert filed(redis_client, job_id) == {
            "ready": None,
            "delayed": now + 60,
            "states": ["pending"],
        }
        assert await q.change_priority(job_id, 4) is True  # delayed: only its hash changes
        assert filed(redis_client, job_id)["delayed"] == now + 60
        assert await q.promote(job_id) is True
        assert filed(redis_client, job_id) == {"ready": -4, "delayed": None, "states": ["pending"]}
        assert await q.change_priority(job_id, -2) is True
        assert filed(redis_client, job_id) == {"ready": 2, "delayed": None, "states": ["pending"]}
        assert redis_client.zcard(BASE + "ready") == 1  # the entry moved, none was added
        assert await q.size("ed") == 1


async def test_rerun_takes_a_done_job_out_of_retention_and_drops_what_it_finished_with(
    redis_url: str, redis_client: redis.Redis
) -> None:
    clock = VirtualClock()
    backends = {"r": config(redis_url, retain_done=60.0)}
    async with Queue(backends=backends, clock=clock, sweep_interval=0) as q:
        job_id = await q.enqueue("ed", "x")
        assert (await q.tick("ed", noop)).succeeded == 1
        assert redis_client.zscore(BASE + "done", job_id) is not None
        assert await q.rerun(job_id) is True
        assert redis_client.zscore(BASE + "done", job_id) is None
        stored = redis_client.hgetall(BASE + "job:" + job_id)
        assert (stored["state"], stored["attempts"]) == ("pending", "0")
        assert not {"finished_at", "result", "token", "expires_at"} & set(stored)
        assert filed(redis_client, job_id) == {"ready": 0, "delayed": None, "states": ["pending"]}
        clock.advance(61)
        await q.sweep()  # retention no longer applies to it
        assert await q.size("ed") == 1


Edit = Callable[[Queue, str], Awaitable[bool]]


async def delayed(q: Queue) -> str:
    return await q.enqueue("ed", "edited", delay=3600)


async def cancelled(q: Queue) -> str:
    job_id = await q.enqueue("ed", "edited")
    assert await q.cancel(job_id) is True
    return job_id


EDITS: dict[str, tuple[Callable[[Queue], Awaitable[str]], Edit]] = {
    "promote": (delayed, lambda q, job_id: q.promote(job_id)),
    "change_delay": (delayed, lambda q, job_id: q.change_delay(job_id, 0)),
    "rerun": (cancelled, lambda q, job_id: q.rerun(job_id)),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_a_job_an_edit_makes_due_starts_with_an_idle_consumer_of_another_queue(
    redis_url: str, edit: str
) -> None:
    make, apply = EDITS[edit]
    started = anyio.Event()

    async def handler(job: Job, ctx: JobContext) -> None:
        started.set()

    # poll_interval and the job's delay are far beyond the safety net: only the signal the
    # edit script pushes can wake the consumer in time (the editing queue's own wake-ups reach
    # only its own consumers).
    async with Queue(backends={"r": config(redis_url)}) as editor:
        job_id = await make(editor)
        async with Queue(backends={"r": config(redis_url)}) as consumer_side:
            await consumer_side.consume("ed", handler, poll_interval=3600)
            await anyio.sleep(0.05)  # let the consumer reach its wait (not required)
            assert await apply(editor, job_id) is True
            with anyio.fail_after(SAFETY_NET):
                await started.wait()
