"""The stream transport (``_streams``, the trio default) on its own, on both loops: a command cut
short closes its connection, scripts a server forgot are loaded again, and a new connection
makes redis-py's handshake (AUTH, SELECT, CLIENT SETNAME, HELLO 3)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
import redis
from redis_helpers import start_server

from blamequeue._clock import SystemClock
from blamequeue.abc import BackendContext
from blamequeue_redis import RedisBackend
from blamequeue_redis._scripts import Script
from blamequeue_redis._streams import StreamTransport, stream_settings
from blamequeue_redis._transport import ClientSettings, ThreadTransport
from blamequeue_testing._conformance.fixtures import wait_until
from blamequeue_testing.servers import RedisServer

pytestmark = pytest.mark.anyio

PASSWORD = "streams-pw"
_ECHO = Script("echo-key", "return {KEYS[1], ARGV[1]}")


def _transport(url: str, **settings: str) -> StreamTransport:
    client = ClientSettings(
        url=url,
        username=settings.get("username"),
        password=settings.get("password"),
        cluster=False,
    ).sync_client()
    found = stream_settings(client)
    assert found is not None
    return StreamTransport(client, found, owned=True)


@pytest.fixture
async def transport(redis_url: str) -> AsyncIterator[StreamTransport]:
    transport = _transport(redis_url)
    try:
        yield transport
    finally:
        await transport.aclose()


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    server = start_server(["--requirepass", PASSWORD])
    try:
        yield server
    finally:
        server.cleanup()


async def test_a_command_cancelled_before_its_reply_closes_its_connection(
    transport: StreamTransport, redis_client: redis.Redis
) -> None:
    first = await transport.command("CLIENT", "ID")
    with anyio.CancelScope() as scope:

        async def cancel_once_blocked() -> None:
            await wait_until(
                lambda: int(redis_client.info("clients")["blocked_clients"]) == 1, "the BLPOP"
            )
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_blocked)
            await transport.command("BLPOP", "never", "5")
    assert scope.cancelled_caught
    # The connection that had a reply pending is gone: the next command gets a fresh one,
    # and its own reply.
    assert await transport.command("CLIENT", "ID") != first
    assert await transport.command("ECHO", "mine") == "mine"


async def test_a_script_the_server_forgot_is_loaded_again(
    transport: StreamTransport, redis_client: redis.Redis
) -> None:
    await transport.load([_ECHO])
    redis_client.script_flush()
    assert await transport.script(_ECHO, ["k"], ["v"]) == ["k", "v"]
    redis_client.script_flush()
    assert await transport.scripts([(_ECHO, ["a"], [1]), (_ECHO, ["b"], [2])]) == [
        ["a", "1"],
        ["b", "2"],
    ]


@pytest.mark.parametrize("protocol", ["2", "3"])
async def test_the_handshake_authenticates_selects_and_names(
    locked_server: RedisServer, protocol: str
) -> None:
    url = f"redis://127.0.0.1:{locked_server.port}/3?client_name=bq-w&protocol={protocol}"
    transport = _transport(url, password=PASSWORD)
    try:
        assert await transport.command("CLIENT", "GETNAME") == "bq-w"
        await transport.command("SET", "handshake", protocol)
        # The blocking waits' own connections make the same handshake.
        assert not await transport.wait("never", 0.01)
    finally:
        await transport.aclose()
    with redis.Redis(port=locked_server.port, password=PASSWORD, db=3) as admin:
        assert admin.get("handshake") == protocol.encode()
    wrong = _transport(url, password="wrong")
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            await wrong.command("PING")
    finally:
        await wrong.aclose()


@pytest.mark.parametrize("anyio_backend", ["trio"])  # asyncio uses redis-py's asyncio client
async def test_trio_uses_the_stream_transport_unless_told_threads(redis_url: str) -> None:
    for choice, kind in (("streams", StreamTransport), ("threads", ThreadTransport)):
        backend = RedisBackend(
            {"url": redis_url, "trio_transport": choice},
            BackendContext(name="r", clock=SystemClock()),
        )
        await backend.open()
        try:
            assert type(backend.transport) is kind
            assert backend.overlapped_lease is (choice == "streams")
        finally:
            await backend.close()
