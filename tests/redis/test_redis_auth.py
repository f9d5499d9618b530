"""Passwords and ACL users: the right credentials work, wrong ones stop the queue at start with a
clear, non-retryable error."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
import redis
from redis_helpers import config, start_server

from blamequeue import Job, JobContext, Queue, QueueError
from blamequeue_testing._conformance.fixtures import wait_until
from blamequeue_testing.servers import RedisServer

pytestmark = pytest.mark.anyio

PASSWORD = "s3cret-pw"

# The narrow command list of docs/backends/redis.md ("Authentication, ACL and TLS").
NARROW = [
    "+evalsha",
    "+eval",
    "+script|load",
    "+client|id",
    "+client|unblock",
    "+blpop",
    "+smembers",
    "+sadd",
    "+zcard",
    "+hset",
    "+hget",
    "+hmget",
    "+hdel",
    "+del",
    "+exists",
    "+incrby",
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrevrange",
    "+zrangebyscore",
    "+zremrangebyrank",
    "+zremrangebyscore",
    "+srem",
    "+scard",
    "+spop",
    "+lpush",
    "+ltrim",
]


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    """A server with a default-user password and three ACL users: ``worker`` may use the
    ``blamequeue:*`` keys, ``narrow`` too but only with the documented commands, ``outsider``
    only ``other:*`` keys."""
    server = start_server(["--requirepass", PASSWORD])
    with redis.Redis(port=server.port, password=PASSWORD) as admin:
        admin.acl_setuser(
            "worker",
            enabled=True,
            passwords=["+worker-pw"],
            keys=["blamequeue:*"],
            commands=["+@all"],
        )
        admin.acl_setuser(
            "outsider",
            enabled=True,
            passwords=["+outsider-pw"],
            keys=["other:*"],
            commands=["+@all"],
        )
        admin.acl_setuser(
            "narrow",
            enabled=True,
            passwords=["+narrow-pw"],
            keys=["blamequeue:*"],
            commands=NARROW,
        )
    try:
        yield server
    finally:
        server.cleanup()


async def noop(job: Job, ctx: JobContext) -> None:
    pass


async def run_one_job(queue: Queue) -> None:
    async with queue:
        await queue.enqueue("q", "job")
        assert (await queue.tick("q", noop)).succeeded == 1


async def test_password_option(locked_server: RedisServer) -> None:
    await run_one_job(Queue(backends={"r": config(locked_server.url, password=PASSWORD)}))


async def test_password_in_the_url(locked_server: RedisServer) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{locked_server.port}/0"
    await run_one_job(Queue(backends={"r": config(url)}))


async def test_acl_user(locked_server: RedisServer) -> None:
    options = config(locked_server.url, username="worker", password="worker-pw")
    await run_one_job(Queue(backends={"r": options}))


async def test_acl_user_with_only_the_documented_commands(locked_server: RedisServer) -> None:
    options = config(
        locked_server.url, username="narrow", password="narrow-pw", cluster=False, max_attempts=1
    )

    async def fail(job: Job, ctx: JobContext) -> None:
        raise RuntimeError("no")

    async with Queue(backends={"r": options}) as queue:
        await queue.enqueue_many("q", ["a", "b"])
        await queue.enqueue("q", "later", delay=60)
        assert (await queue.tick("q", noop, max=1)).succeeded == 1
        assert (await queue.tick("q", fail, max=1)).moved_to_dlq == 1
        [letter] = await queue.dlq_list("q")
        assert await queue.dlq_retry(letter.job_id)
        assert await queue.sweep() == 0
        assert await queue.size("q") == 2
        assert await queue.purge("q") == 2
        assert await queue.dlq_purge("q") == 0
        consumer = await queue.consume("q", noop, poll_interval=0.01)
        await anyio.sleep(0.05)  # the consumer blocks on BLPOP, then is woken and stopped
        consumer.cancel()
        await consumer.wait_stopped()


@pytest.mark.parametrize(
    "credentials",
    [{}, {"password": "wrong"}, {"username": "worker", "password": "wrong"}],
    ids=["none", "wrong-password", "wrong-user-password"],
)
async def test_wrong_credentials_fail_the_start_clearly(
    locked_server: RedisServer, credentials: dict[str, str]
) -> None:
    queue = Queue(backends={"r": config(locked_server.url, **credentials)})
    with pytest.raises(QueueError) as info:
        await queue.start()
    assert info.value.code == "queue/invalid-config"
    assert not info.value.retryable
    assert "password" in info.value.message
    assert "wrong" not in info.value.message  # the password is never echoed


async def test_a_user_without_access_to_the_keys_gets_a_clear_error(
    locked_server: RedisServer,
) -> None:
    options = config(locked_server.url, username="outsider", password="outsider-pw")
    async with Queue(backends={"r": options}) as queue:
        with pytest.raises(QueueError) as info:
            await queue.enqueue("q", "job")
        assert info.value.code == "queue/invalid-config"
        assert not info.value.retryable
        assert "permission" in info.value.message
        assert queue.list_backends()[0].breaker_state == "closed"


async def test_results_without_the_events_channels_fall_back_to_polling(
    locked_server: RedisServer,
) -> None:
    # Redis 7 ACL users get no pub/sub channels unless granted (&pattern): settling must not
    # fail on the settle script's PUBLISH, and result() polls instead of subscribing.
    queue = Queue(
        backends={"r": config(locked_server.url, username="worker", password="worker-pw")}
    )
    async with queue:
        job_id = await queue.enqueue("q", 20)
        values: list[object] = []
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                values.append(await queue.result(job_id, timeout=30))

            tg.start_soon(wait)
            await anyio.sleep(0.05)
            assert (await queue.tick("q", lambda job, ctx: job.payload + 1)).succeeded == 1
        assert values == [21]


async def test_an_acl_user_keeps_the_worker_registry_records_and_metrics(
    locked_server: RedisServer, anyio_backend: str
) -> None:
    # Every key the backend writes starts with the key prefix, so an ACL user granted only the
    # prefix's key pattern keeps the worker registry, shared records and metrics too.
    options = config(locked_server.url, username="worker", password="worker-pw")
    name = f"acl-{anyio_backend}"  # the server outlives one test
    ran = anyio.Event()

    async def handler(job: Job, ctx: JobContext) -> None:
        ran.set()

    async with Queue(backends={"r": options}) as queue:
        consumer = await queue.consume(name, handler, poll_interval=0.01)
        await queue.enqueue(name, "job")
        with anyio.fail_after(10):
            await ran.wait()
        await wait_until(lambda: consumer.stats.succeeded == 1, "the job to settle")
        [worker] = await queue.workers()  # registered when the consumer started
        assert worker.queue == name
        assert (await queue.metrics(name)).succeeded == 1
        assert await queue.records().put("acl-test", "k", 1)
        report = await queue.health()
        assert report.status == "healthy"
        consumer.cancel()
        await consumer.wait_stopped()
