"""An enqueue whose reply is lost after Redis stored it (a network cut, a failover, a client
timeout between the command and its answer): the queue's retry sends the same batch again, and
that must be acknowledged, once, not refused (SPEC §3.10, §14).

Regression: the retry found the job ids it had just written and answered ``queue/bad-argument``
"a job with id ... already exists", a non-retryable error for a job that was in fact stored, so
the producer believed the enqueue failed (and an application re-enqueueing it ran it twice).

The fault is real: a TCP proxy (``reply_cutter.py``) passes the enqueue script to the real
server and closes the client's connection instead of passing its reply on.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import pytest
from redis_helpers import config, start_server
from reliability_report import Tally
from reply_cutter import ReplyCutter

from blamequeue import Job, JobContext, Queue
from blamequeue._clock import SystemClock
from blamequeue.abc import BackendContext, NewJob
from blamequeue.errors import BadArgumentError
from blamequeue_redis import RedisBackend
from blamequeue_redis._scripts import ENQUEUE
from blamequeue_testing.servers import RedisServer

pytestmark = pytest.mark.anyio

SCENARIO = "redis-reply-lost-after-enqueue"
RETRY = {"attempts": 3, "base": 0.01, "cap": 0.01}


T0 = 1_000.0


def new_job(job_id: str, *, payload: str = '"p"', created_at: float = T0) -> NewJob:
    return NewJob(
        id=job_id,
        queue="q",
        payload=payload,
        priority=0,
        max_attempts=5,
        created_at=created_at,
        available_at=created_at,
    )


@pytest.fixture
def server() -> Iterator[RedisServer]:
    started = start_server()
    try:
        yield started
    finally:
        started.cleanup()


@pytest.fixture
def cutter(server: RedisServer) -> Iterator[ReplyCutter]:
    proxy = ReplyCutter(server.port)
    try:
        yield proxy
    finally:
        proxy.close()


async def drain(queue: Queue, ran: collections.Counter[str]) -> None:
    async def handler(job: Job, ctx: JobContext) -> None:
        ran[job.id] += 1

    while (await queue.tick("q", handler, max=100)).leased:
        pass


@pytest.mark.parametrize("batch", [1, 50])
async def test_an_enqueue_whose_reply_was_lost_is_acknowledged_once_on_retry(
    batch: int, cutter: ReplyCutter, anyio_backend: str, reliability_tally: Tally
) -> None:
    ran: collections.Counter[str] = collections.Counter()
    queue = Queue(backends={"r": config(cutter.url, retry=RETRY)}, sweep_interval=0)
    async with queue:
        cutter.arm(ENQUEUE.sha)
        if batch == 1:
            acked = [await queue.enqueue("q", {"n": 0})]
        else:
            acked = await queue.enqueue_many("q", [{"n": n} for n in range(batch)])
        assert cutter.cuts == 1, "the first reply was lost"
        assert await queue.size("q") == batch, "stored once"
        await drain(queue, ran)

    reliability_tally.add(
        SCENARIO,
        f"redis/{anyio_backend}",
        enqueued=len(acked),
        completed=len(set(acked) & set(ran)),
        run_more_than_once=sum(1 for count in ran.values() if count > 1),
        lost=len(set(acked) - set(ran)),
        replies_lost=cutter.cuts,
    )
    assert set(ran) == set(acked)
    assert max(ran.values()) == 1


async def test_only_a_replay_of_the_very_same_batch_is_acknowledged(
    server: RedisServer, anyio_backend: str
) -> None:
    backend = RedisBackend({"url": server.url}, BackendContext(name="r", clock=SystemClock()))
    await backend.open()
    try:
        first = [new_job("a"), new_job("b")]
        await backend.enqueue(first)
        await backend.enqueue(first)  # the retry after a lost reply: already stored, fine
        assert await backend.size("q") == 2

        for batch in (
            [new_job("a", payload='"other"')],  # the id is taken by another job
            [new_job("a", created_at=T0 + 1)],
            [new_job("a"), new_job("c")],  # part replay, part new: not a replay
            [new_job("c"), new_job("c")],
        ):
            with pytest.raises(BadArgumentError, match="already exists"):
                await backend.enqueue(batch)
        assert await backend.size("q") == 2, "nothing of a refused batch stored"
    finally:
        await backend.close()
