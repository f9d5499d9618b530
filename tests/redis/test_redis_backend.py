"""RedisBackend against a real redis-server: key layout, scripts, ordering details, retention,
sealing at rest, blocking waits and bring-your-own clients (on asyncio and trio)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs
import pytest
import redis
import redis.asyncio
from redis.crc import key_slot
from redis_helpers import SEAL, T0, config, new_job

from blamequeue import Job, JobContext, Queue
from blamequeue._clock import SystemClock
from blamequeue.abc import BackendContext, NewJob, Settlement
from blamequeue.errors import BadArgumentError, ConfigError
from blamequeue_redis import RedisBackend
from blamequeue_redis._backend import _enqueue_batch
from blamequeue_redis._keys import hash_tag
from blamequeue_redis._scripts import ENQUEUE_WIDTH, SCRIPTS, Script
from blamequeue_redis._transport import POOL_SIZE
from blamequeue_testing import VirtualClock
from blamequeue_testing.servers import RedisServer

pytestmark = pytest.mark.anyio

SAFETY_NET = 10.0  # real seconds before a wait is declared hung (never reached when it works)


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    backend = RedisBackend({"url": redis_url}, BackendContext(name="r", clock=SystemClock()))
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


async def lease_ids(backend: RedisBackend, now: float = T0, queue: str = "q") -> list[str]:
    leases = await backend.lease(queue, limit=100, now=now, lease_seconds=30.0)
    return [lease.job.id for lease in leases]


async def noop(job: Job, ctx: JobContext) -> None:
    pass


# -- key layout ----------------------------------------------------------------------------
async def test_every_key_of_a_queue_carries_its_name_as_hash_tag(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async with Queue(backends={"r": config(redis_url)}, clock=VirtualClock()) as queue:
        for name in ("orders", "we{ir}d%q"):
            await queue.enqueue_many(name, [1, 2])
            await queue.enqueue(name, 3, delay=60)
            await queue.tick(name, noop, max=1)
    keys = set(redis_client.keys("*"))
    assert "blamequeue:queue:queues" in keys
    for name in ("orders", "we{ir}d%q"):
        tag = "{" + hash_tag(name) + "}"
        mine = {key for key in keys if tag in key}
        expected = {f"blamequeue:queue:{tag}:{suffix}" for suffix in ("ready", "delayed", "done")}
        assert expected <= mine
        assert any(":job:" in key for key in mine)
        assert len({key_slot(key.encode()) for key in mine}) == 1
    assert hash_tag("we{ir}d%q") == "we%7Bir%7Dd%25q"


async def test_key_prefix_keeps_apps_apart(redis_url: str, redis_client: redis.Redis) -> None:
    shop = config(redis_url, key_prefix="shop")
    blog = config(redis_url, key_prefix="blog")
    async with Queue(backends={"shop": shop, "blog": blog}, default_backend="shop") as queue:
        await queue.enqueue("mail", "from shop")
        assert await queue.size("mail", backend="blog") == 0
        assert await queue.size("mail", backend="shop") == 1
    assert all(key.startswith("shop:") for key in redis_client.keys("*"))


# -- scripts -------------------------------------------------------------------------------
async def test_scripts_are_loaded_at_open(backend: RedisBackend, redis_client: redis.Redis) -> None:
    assert redis_client.script_exists(*(script.sha for script in SCRIPTS)) == [True] * len(SCRIPTS)


async def test_scripts_are_reloaded_after_script_flush(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    await backend.enqueue([new_job("a")])
    redis_client.script_flush()
    await backend.enqueue([new_job("b")])
    assert await lease_ids(backend) == ["a", "b"]
    assert await backend.size("q") == 2


async def test_scripts_are_reloaded_after_a_server_restart() -> None:
    with RedisServer(args=["--appendonly", "yes"]) as server:
        async with Queue(backends={"r": config(server.url)}, clock=VirtualClock()) as queue:
            await queue.enqueue("q", "before")
            server.restart()  # the job survives (AOF); the scripts do not
            await queue.enqueue("q", "after")
            seen: list[Any] = []

            async def record(job: Job, ctx: JobContext) -> None:
                seen.append(job.payload)

            result = await queue.tick("q", record)
            assert (result.leased, seen) == (2, ["before", "after"])


_SLOW_ECHO = Script(
    "slow_echo",
    """
local start = redis.call('TIME')
local spent = 0
while spent < tonumber(ARGV[2]) do
  local now = redis.call('TIME')
  spent = (now[1] - start[1]) * 1000000 + (now[2] - start[2])
end
return ARGV[1]
""",
)


async def test_a_script_cancelled_before_its_reply_never_hands_that_reply_to_another_call(
    backend: RedisBackend,
) -> None:
    # The asyncio transport keeps its own connections for scripts: one abandoned with a reply
    # on its way must be dropped, or the next call would read the stale reply as its own.
    transport = backend._boundary.require()
    for n in range(5):
        with anyio.move_on_after(0.005):
            await transport.script(_SLOW_ECHO, ["k"], [f"late-{n}", "30000"])
        assert await transport.script(_SLOW_ECHO, ["k"], [f"now-{n}", "0"]) == f"now-{n}"


async def test_scripts_at_once_share_a_bounded_set_of_connections(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    transport = backend._boundary.require()
    before = len(redis_client.client_list())
    replies: list[str] = []

    async def call(n: int) -> None:
        replies.append(await transport.script(_SLOW_ECHO, ["k"], [str(n), "2000"]))

    async with anyio.create_task_group() as tg:
        for n in range(3 * POOL_SIZE):
            tg.start_soon(call, n)
    assert sorted(replies, key=int) == [str(n) for n in range(3 * POOL_SIZE)]
    assert len(redis_client.client_list()) - before <= POOL_SIZE


async def test_consumers_overlap_leases_only_where_calls_cost_no_thread(
    backend: RedisBackend,
) -> None:
    # Both loops' default transports do non-blocking I/O (the thread transport, which costs a
    # worker thread's round trip per call, does not overlap: test_redis_streams).
    assert backend.overlapped_lease


# -- transitions the public API cannot reach --------------------------------------------------
async def test_available_at_orders_exactly_to_the_last_bit(backend: RedisBackend) -> None:
    later = math.nextafter(T0, math.inf)
    await backend.enqueue(
        [
            new_job("later", available_at=later, created_at=later),
            new_job("earlier", available_at=T0, created_at=T0),
        ]
    )
    assert await lease_ids(backend, now=later) == ["earlier", "later"]


async def test_one_batch_stores_every_kind_of_row_as_sent(backend: RedisBackend) -> None:
    # ENQUEUE reads a mixed batch's rows as one flat array: rows with and without optional
    # fields, delayed, parked behind dependencies and in a flow must each land whole, none
    # shifted.
    plain = new_job("plain", priority=-3)
    tagged = attrs.evolve(
        new_job("tagged", available_at=T0 + 60, priority=2**31 - 1),
        classification="pii",
        trace_id="trace-1",
        meta='{"k":1}',
        group_key="tenant-a",
    )
    child = attrs.evolve(
        new_job("child", priority=-(2**31)),
        flow_id="f1",
        depends_on=("plain", "tagged"),
        parked=True,
    )
    ids, _payloads, shared, rows = _enqueue_batch([plain, tagged, child])
    assert (ids, shared, len(rows)) == (["plain", "tagged", "child"], 0, 3 * ENQUEUE_WIDTH)
    await backend.enqueue([plain, tagged, child])
    await assert_stored_as_sent(backend, [plain, tagged, child])
    assert await lease_ids(backend, now=T0 + 60) == ["tagged", "plain"]


@pytest.mark.parametrize("last_differs_in", [None, "priority", "meta", "depends_on"])
async def test_a_batch_sharing_its_options_sends_them_once_and_stores_each_job_whole(
    backend: RedisBackend, last_differs_in: str | None
) -> None:
    # What one enqueue_many call makes (the same options, ids and payloads of their own)
    # travels as one shared row; a batch whose last job alone differs goes row by row.
    jobs = [
        attrs.evolve(
            new_job(f"j{n}", available_at=T0 + 60, priority=4, payload=f'"p{n}"'),
            classification="pii",
            trace_id="trace-1",
            meta='{"k":1}',
            group_key="tenant-a",
        )
        for n in range(5)
    ]
    differs = {"priority": 5, "meta": '{"k":2}', "depends_on": ("j0",)}
    if last_differs_in is not None:
        jobs[-1] = attrs.evolve(jobs[-1], **{last_differs_in: differs[last_differs_in]})
    ids, payloads, shared, rows = _enqueue_batch(jobs)
    assert (ids, payloads) == ([job.id for job in jobs], [job.payload for job in jobs])
    if last_differs_in is None:
        assert (len(shared), rows) == (ENQUEUE_WIDTH, 0)
    else:
        assert (shared, len(rows)) == (0, len(jobs) * ENQUEUE_WIDTH)
    await backend.enqueue(jobs)
    await assert_stored_as_sent(backend, jobs)


async def assert_stored_as_sent(backend: RedisBackend, jobs: list[NewJob]) -> None:
    for sent in jobs:
        got = await backend.get_job(sent.id)
        assert got is not None
        assert (got.payload, got.priority, got.max_attempts, got.attempts) == (
            sent.payload,
            sent.priority,
            sent.max_attempts,
            0,
        )
        assert (got.created_at, got.available_at) == (sent.created_at, sent.available_at)
        assert (got.classification, got.trace_id, got.meta, got.group_key) == (
            sent.classification,
            sent.trace_id,
            sent.meta,
            sent.group_key,
        )
        assert (got.flow_id, tuple(got.depends_on)) == (sent.flow_id, sent.depends_on)
        assert got.state == ("parked" if sent.parked else "pending")


async def test_negative_and_positive_times_order_by_value(backend: RedisBackend) -> None:
    times = [3.5, -1.0, 0.0, -7.25, 1e-9]
    await backend.enqueue(
        [new_job(f"t{n}", available_at=t, created_at=t) for n, t in enumerate(times)]
    )
    expected = [f"t{n}" for n, _ in sorted(enumerate(times), key=lambda item: item[1])]
    assert await lease_ids(backend, now=10.0) == expected


async def test_job_due_by_a_clock_ahead_of_ours_waits_until_our_clock_gets_there(
    backend: RedisBackend,
) -> None:
    ahead = T0 + 100
    # Due at enqueue by the producer's clock, which runs 100 s ahead of the consumer's.
    await backend.enqueue([new_job("a", available_at=ahead, created_at=ahead)])
    assert await lease_ids(backend, now=T0) == []
    assert await lease_ids(backend, now=ahead) == ["a"]


async def test_enqueue_is_all_or_nothing_on_a_duplicate_id(backend: RedisBackend) -> None:
    await backend.enqueue([new_job("a")])
    with pytest.raises(BadArgumentError):
        await backend.enqueue([new_job("b"), new_job("a")])
    with pytest.raises(BadArgumentError):
        await backend.enqueue([new_job("c"), new_job("c")])
    assert await backend.size("q") == 1


async def test_stored_text_comes_back_verbatim(backend: RedisBackend) -> None:
    payload = '{"text": "nul \\u0000 and \\ud800 and \u00e9\u4e2d"}'
    odd = "nul \x00, lone surrogate \ud800, accents \u00e9"
    job = NewJob(
        id="a",
        queue="q",
        payload=payload,
        priority=-(2**31),
        max_attempts=3,
        created_at=T0,
        available_at=T0,
        classification=odd,
        trace_id="",
        meta='{"backoff": [1]}',
    )
    await backend.enqueue([job])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=5.0)
    stored = lease.job
    assert (stored.payload, stored.classification, stored.trace_id) == (payload, odd, "")
    assert (stored.priority, stored.attempts, stored.max_attempts) == (-(2**31), 1, 3)
    assert stored.meta == '{"backoff": [1]}'
    settled = await backend.settle(
        [Settlement(job_id="a", token=lease.token, outcome="dead", at=T0, error=odd)], now=T0
    )
    assert settled == [True]
    [dead] = await backend.dlq_list("q", limit=None)
    assert dead.last_error == odd.encode("utf-8", "backslashreplace").decode("utf-8")


async def test_a_forged_token_owns_nothing(backend: RedisBackend) -> None:
    await backend.enqueue([new_job("a")])
    [lease] = await backend.lease("q", limit=1, now=T0, lease_seconds=5.0)
    forged = ["nonsense", "0" * 16 + ":q", lease.token + "x", lease.token[:16] + ":other"]
    results = await backend.settle(
        [Settlement(job_id="a", token=t, outcome="done", at=T0) for t in forged], now=T0
    )
    assert results == [False] * len(forged)
    assert await backend.extend([("a", t) for t in forged], expires_at=T0 + 60) == [False] * 4


async def test_dlq_retry_finds_the_job_in_any_queue(backend: RedisBackend) -> None:
    await backend.enqueue([new_job("a", "first"), new_job("b", "second")])
    [lease] = await backend.lease("second", limit=1, now=T0, lease_seconds=5.0)
    await backend.settle(
        [Settlement(job_id="b", token=lease.token, outcome="dead", at=T0, error="e")], now=T0
    )
    retried = await backend.dlq_retry("b", now=T0 + 1)
    assert retried is not None
    assert (retried.queue, retried.state, retried.attempts) == ("second", "dead", 1)
    assert await lease_ids(backend, now=T0 + 1, queue="second") == ["b"]
    assert await backend.dlq_retry("b", now=T0 + 2) is None


# -- retention and memory ------------------------------------------------------------------
async def test_done_jobs_expire_by_retention_so_memory_stays_bounded(
    redis_url: str, redis_client: redis.Redis
) -> None:
    clock = VirtualClock()
    backends = {"r": config(redis_url, retain_done=60.0)}
    async with Queue(backends=backends, clock=clock, sweep_interval=0) as queue:
        await queue.enqueue_many("q", list(range(50)))
        assert (await queue.tick("q", noop, max=100)).succeeded == 50
        job_keys = redis_client.keys("*:job:*")
        assert len(job_keys) == 50  # retained as done
        clock.advance(61)
        await queue.sweep()
        assert redis_client.keys("*:job:*") == []
        # What is left is bookkeeping: the registry, the enqueue counter, wake-up tokens, and
        # the metrics of the minute the jobs ran in (one record and its two index keys, plus
        # the registry of record kinds), which expire in turn: bounded by minutes, not jobs.
        left = redis_client.keys("*")
        assert len([key for key in left if ":rec" not in key]) <= 3
        # The all-time totals record of the queue (for the Prometheus endpoint) stays: one per
        # queue, bounded by queues, not jobs.
        assert len([key for key in left if ":rec" in key and "{metrics-totals}" not in key]) <= 4
        clock.advance(24 * 3600 + 120)
        await queue.sweep()
        left = redis_client.keys("*")
        assert [key for key in left if ":rec:" in key and "{metrics-totals}" not in key] == []


async def test_done_jobs_are_deleted_at_once_without_retention(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async with Queue(backends={"r": config(redis_url, retain_done=0)}) as queue:
        await queue.enqueue_many("q", [1, 2, 3])
        await queue.tick("q", noop)
    assert redis_client.keys("*:job:*") == []


async def test_payloads_and_errors_are_sealed_at_rest(
    redis_url: str, redis_client: redis.Redis
) -> None:
    secret = "card-4111-1111"

    async def leak(job: Job, ctx: JobContext) -> None:
        raise RuntimeError(f"declined {secret}")

    async with Queue(backends={"r": config(redis_url, max_attempts=1)}) as queue:
        await queue.enqueue("q", {"card": secret})
        await queue.tick("q", leak)
        [letter] = await queue.dlq_list("q")
        assert letter.payload == {"card": secret}
    stored = [redis_client.hgetall(key) for key in redis_client.keys("*:job:*")]
    assert stored
    for job in stored:
        assert job["payload"].startswith("bq1:")
        assert job["last_error"].startswith("bq1:")
        assert all(secret not in value for value in job.values())


# -- blocking waits ------------------------------------------------------------------------
async def test_wait_for_work_wakes_on_another_connections_enqueue(redis_url: str) -> None:
    waiter = RedisBackend({"url": redis_url}, BackendContext(name="w", clock=SystemClock()))
    producer = RedisBackend({"url": redis_url}, BackendContext(name="p", clock=SystemClock()))
    await waiter.open()
    await producer.open()
    try:
        woke = anyio.Event()

        async def wait() -> None:
            await waiter.wait_for_work("q", timeout=60.0)
            woke.set()

        with anyio.fail_after(SAFETY_NET):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(0.05)  # let the BLPOP reach the server (not required)
                await producer.enqueue([new_job("a")])
                await woke.wait()
    finally:
        await waiter.close()
        await producer.close()


async def test_a_cancelled_wait_keeps_its_connection(
    backend: RedisBackend, redis_client: redis.Redis
) -> None:
    before = len(redis_client.client_list())
    for _ in range(20):
        with anyio.move_on_after(0.01):
            await backend.wait_for_work("q", timeout=60.0)
    # One dedicated connection serves every wait; nothing blocks on the server any more.
    assert len(redis_client.client_list()) <= before + 1
    assert redis_client.info("clients")["blocked_clients"] == 0
    await backend.enqueue([new_job("a")])
    with anyio.fail_after(SAFETY_NET):
        await backend.wait_for_work("q", timeout=60.0)


async def test_wait_for_work_returns_after_its_timeout(backend: RedisBackend) -> None:
    with anyio.fail_after(SAFETY_NET):
        await backend.wait_for_work("q", timeout=0.01)
        await backend.wait_for_work("q", timeout=0.0)


async def test_an_idle_consumer_starts_a_job_enqueued_by_another_queue(redis_url: str) -> None:
    started = anyio.Event()

    async def handler(job: Job, ctx: JobContext) -> None:
        started.set()

    # poll_interval is far beyond the safety net: only the blocking wait can wake it in time.
    async with Queue(backends={"r": config(redis_url)}) as consumer_side:
        await consumer_side.consume("q", handler, poll_interval=3600)
        await anyio.sleep(0.05)
        async with Queue(backends={"r": config(redis_url)}) as producer_side:
            await producer_side.enqueue("q", "hello")
        with anyio.fail_after(SAFETY_NET):
            await started.wait()


# -- bring your own client -----------------------------------------------------------------
async def test_a_sync_client_is_used_and_never_closed(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        async with Queue(backends={"r": {"protocol": "redis", "client": client}}, seal=SEAL) as q:
            await q.enqueue("q", 1)
            assert (await q.tick("q", noop)).succeeded == 1
        assert client.ping()
    finally:
        client.close()


async def test_an_asyncio_client_works_on_asyncio_and_is_refused_on_trio(
    redis_url: str, anyio_backend: str
) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    queue = Queue(backends={"r": {"protocol": "redis", "client": client}}, seal=SEAL)
    try:
        if anyio_backend == "trio":
            with pytest.raises(ConfigError) as info:
                await queue.start()
            assert "asyncio" in info.value.message
            return
        async with queue:
            await queue.enqueue("q", 1)
            assert (await queue.tick("q", noop)).succeeded == 1
        assert await client.ping()
    finally:
        if anyio_backend == "asyncio":
            await client.aclose()


# -- chosen ids (JobIds) ------------------------------------------------------------------
async def test_enqueue_absent_stores_only_the_ids_not_held_and_the_first_of_a_repeat(
    backend: RedisBackend,
) -> None:
    await backend.enqueue([new_job("held")])
    # The repeats carry other payloads (a job stored exactly as sent is a lost reply's retry).
    shared = [
        new_job("a"),
        new_job("held", payload='"2"'),
        new_job("b"),
        new_job("a", payload='"2"'),
        new_job("c"),
    ]
    assert await backend.enqueue_absent(shared) == [True, False, True, False, True]
    # Jobs that differ beyond id and payload travel with rows of their own: each kept job
    # keeps its own values.
    own_rows = [new_job("d", priority=2), new_job("b", payload='"2"'), new_job("e", priority=1)]
    assert await backend.enqueue_absent(own_rows) == [True, False, True]
    assert await lease_ids(backend) == ["d", "e", "held", "a", "b", "c"]


async def test_enqueue_absent_answers_a_lost_reply_retry_as_stored(backend: RedisBackend) -> None:
    job = new_job("once")
    assert await backend.enqueue_absent([job]) == [True]
    assert await backend.enqueue_absent([job]) == [True]  # the same job, as sent
    assert await backend.enqueue_absent([new_job("once", payload='"other"')]) == [False]
    assert await lease_ids(backend) == ["once"]
