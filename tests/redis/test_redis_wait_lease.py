"""``wait_and_lease``: an idle consumer's blocking wait and its lease in one exchange.  Redis
runs the lease the moment the wait takes a wake token, so a woken consumer gets its jobs without
a round trip of its own; a wait that times out or is cancelled leaves nothing leased and no key
behind."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
import redis
from redis_helpers import LocalCluster, new_job

from blamequeue._clock import SystemClock
from blamequeue.abc import BackendContext, NewJob, Settlement
from blamequeue_redis import RedisBackend

pytestmark = pytest.mark.anyio

LEASE = 30.0
SAFETY_NET = 10.0  # real seconds before a wait is declared hung (never reached when it works)


def due_job(job_id: str) -> NewJob:
    # Due a second ago: the lease's clock is the waiter's, read as the wait is sent and moved on
    # by the time Redis saw it wait; on trio (a worker thread waiting for the GIL) that reading
    # can be milliseconds older than the wait, so a job made the same instant may not be due
    # yet by it (the consumer then leases it with a call of its own).  These tests are about
    # the exchange, not that margin.
    now = time.time() - 1.0
    return new_job(job_id, created_at=now, available_at=now)


async def opened(url: str, **options: Any) -> RedisBackend:
    backend = RedisBackend({"url": url, **options}, BackendContext(name="r", clock=SystemClock()))
    await backend.open()
    return backend


@pytest.fixture(params=["single", "cluster"])
def target(
    request: pytest.FixtureRequest, redis_url: str
) -> Iterator[tuple[str, dict[str, Any], redis.Redis | redis.cluster.RedisCluster]]:
    """(url, backend options, a sync client to look at the store) on one server or a cluster."""
    if request.param == "single":
        with redis.Redis.from_url(redis_url, decode_responses=True) as client:
            yield redis_url, {}, client
        return
    cluster: LocalCluster = request.getfixturevalue("redis_cluster")
    cluster.flush()
    client = redis.cluster.RedisCluster.from_url(cluster.url, decode_responses=True)
    try:
        yield cluster.url, {"cluster": True}, client
    finally:
        client.close()


@pytest.fixture
async def pair(
    target: tuple[str, dict[str, Any], Any],
) -> AsyncIterator[tuple[RedisBackend, RedisBackend, Any]]:
    """A waiting backend, a producing one (another connection, as another process would
    be), and the sync client."""
    url, options, client = target
    waiter = await opened(url, **options)
    producer = await opened(url, **options)
    try:
        yield waiter, producer, client
    finally:
        await waiter.close()
        await producer.close()


def wake_keys(client: Any) -> list[str]:
    return list(client.scan_iter(match="*wake:*"))


async def until_blocked(client: Any) -> None:
    with anyio.fail_after(SAFETY_NET):
        while not any(c.get("cmd") == "blmove" for c in _clients(client)):  # noqa: ASYNC110
            await anyio.sleep(0.002)


def _clients(client: Any) -> list[dict[str, Any]]:
    """The connections of the server (on a cluster: of the node owning the queue's slot)."""
    if isinstance(client, redis.cluster.RedisCluster):
        node = client.get_node_from_key("{q}")
        return list(client.get_redis_connection(node).client_list())
    return list(client.client_list())


async def test_a_wait_that_takes_a_wake_token_leases_in_the_same_exchange(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    waiter, producer, client = pair
    taken: list[Any] = []

    async def wait() -> None:
        taken.append(
            await waiter.wait_and_lease(
                "q", timeout=SAFETY_NET, limit=5, now=time.time(), lease_seconds=LEASE
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await until_blocked(client)
        await producer.enqueue([due_job("j1"), due_job("j2")])
    (leases,) = taken
    assert sorted(lease.job.id for lease in leases) == ["j1", "j2"]
    assert {lease.job.state for lease in leases} == {"inflight"}
    assert [lease.job.attempts for lease in leases] == [1, 1]
    # Leased at the moment the wait ended (the server's elapsed time added to ours).
    assert abs(leases[0].expires_at - (time.time() + LEASE)) < 5.0
    stored = await producer.get_job("j1")
    assert stored is not None
    assert stored.state == "inflight"
    # The lease's token owns the jobs: settling with it applies.
    settled = await producer.settle(
        [
            Settlement(job_id=lease.job.id, token=lease.token, outcome="done", at=time.time())
            for lease in leases
        ],
        now=time.time(),
    )
    assert settled == [True, True]
    assert wake_keys(client) == []


async def test_the_lease_takes_no_more_than_its_limit(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    waiter, producer, client = pair
    await producer.enqueue([due_job(f"j{n}") for n in range(5)])  # also leaves wake tokens
    leases = await waiter.wait_and_lease(
        "q", timeout=SAFETY_NET, limit=2, now=time.time(), lease_seconds=LEASE
    )
    assert leases is not None
    assert len(leases) == 2
    rest = await producer.lease("q", limit=10, now=time.time(), lease_seconds=LEASE)
    assert len(rest) == 3
    assert wake_keys(client) == []


async def test_a_wait_that_times_out_leases_nothing_and_leaves_no_key(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    waiter, _, client = pair
    leases = await waiter.wait_and_lease(
        "q", timeout=0.05, limit=5, now=time.time(), lease_seconds=LEASE
    )
    assert leases == []
    assert wake_keys(client) == []


async def test_a_cancelled_wait_gives_back_what_it_took(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    waiter, producer, client = pair
    await producer.enqueue([due_job("j1")])
    signal = waiter._keys("q")[0].signal
    client.delete(signal)  # so that the wait blocks although j1 is pending
    async with anyio.create_task_group() as tg:

        async def wait() -> None:
            await waiter.wait_and_lease(
                "q", timeout=SAFETY_NET, limit=5, now=time.time(), lease_seconds=LEASE
            )

        tg.start_soon(wait)
        await until_blocked(client)
        # A wake token pushed by a blocking client: when LPUSH returns, Redis has served the
        # wait and run its lease, and the cancellation below reaches the waiting task before
        # it read that reply, or as it reads it (woken by the wait's first reply in the same
        # step of the event loop): either way it must give j1 back.
        client.lpush(signal, "1")
        tg.cancel_scope.cancel()
    stored = await producer.get_job("j1")
    assert stored is not None
    assert (stored.state, stored.attempts) == ("pending", 0)
    leases = await producer.lease("q", limit=5, now=time.time(), lease_seconds=LEASE)
    assert [lease.job.id for lease in leases] == ["j1"]
    assert wake_keys(client) == []


async def test_scripts_the_server_forgot_are_loaded_again_and_the_wait_only_waits(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    waiter, producer, client = pair
    await producer.enqueue([due_job("j1")])
    client.script_flush()  # on a cluster: on every node
    # Nothing leased: the caller leases itself (and the token the wait took is dropped).
    assert (
        await waiter.wait_and_lease("q", timeout=1.0, limit=5, now=time.time(), lease_seconds=LEASE)
        is None
    )
    assert wake_keys(client) == []
    await producer.enqueue([due_job("j2")])
    leases = await waiter.wait_and_lease(
        "q", timeout=SAFETY_NET, limit=5, now=time.time(), lease_seconds=LEASE
    )
    assert leases is not None
    assert sorted(lease.job.id for lease in leases) == ["j1", "j2"]


async def test_a_cancelled_wait_that_took_nothing_ends_at_once_and_its_connection_serves_on(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    waiter, producer, client = pair

    async def wait(got: list[str]) -> None:
        leases = await waiter.wait_and_lease(
            "q", timeout=SAFETY_NET, limit=5, now=time.time(), lease_seconds=LEASE
        )
        got += [lease.job.id for lease in leases or []]

    with anyio.fail_after(SAFETY_NET / 2):  # not the wait's own timeout: CLIENT UNBLOCK ends it
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, [])
            first = await blocked_waiter(client)
            tg.cancel_scope.cancel()
        got: list[str] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, got)
            assert await blocked_waiter(client) == first  # the same connection, waiting again
            await producer.enqueue([due_job("j1")])
    assert got == ["j1"]
    assert wake_keys(client) == []


async def blocked_waiter(client: Any) -> str:
    """The id of the connection blocked in the wait."""
    await until_blocked(client)
    return next(str(c["id"]) for c in _clients(client) if c.get("cmd") == "blmove")


async def test_a_waiting_connection_the_server_closed_while_idle_is_replaced(
    redis_url: str,
) -> None:
    waiter = await opened(redis_url)
    try:
        assert await waiter.wait_and_lease(
            "q", timeout=0.01, limit=5, now=time.time(), lease_seconds=LEASE
        ) in ([], None)
        with redis.Redis.from_url(redis_url) as client:
            # What a server restart does to every idle connection, without the restart.
            assert client.client_kill_filter(_type="normal", skipme=True) >= 1
            producer = await opened(redis_url)
            try:
                await producer.enqueue([due_job("j1")])
            finally:
                await producer.close()
        with anyio.fail_after(SAFETY_NET):
            leases = await waiter.wait_and_lease(
                "q", timeout=SAFETY_NET, limit=5, now=time.time(), lease_seconds=LEASE
            )
        assert [lease.job.id for lease in leases or []] == ["j1"]
    finally:
        await waiter.close()
