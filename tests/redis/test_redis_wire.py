"""Replies read by the transport's own connections (``_wire``) are what redis-py itself reads.

On asyncio the transport sends scripts over connections it took over from redis-py and parses
the replies itself; on trio the stream transport does so with the same parser (``_resp``,
compared with redis-py's reading here on asyncio).  Either way a script's
reply must come back exactly as redis-py's own parser types it, in RESP2 and in RESP3 (redis-py's
default), whole however it arrives (read by the event loop, or by polling the socket for a
reply due soon), and an idle connection the server closed must not fail the next call.

Taking connections over and polling for replies are accelerators (``_accelerators``): their
probes must accept the installed redis-py and asyncio, and the same tests pass on the portable
path (``BLAMEQUEUE_PORTABLE=1``: scripts through redis-py's public client).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import redis
import redis.asyncio.connection
import redis.exceptions
from redis.exceptions import NoScriptError, ResponseError

import blamequeue_redis._resp
import blamequeue_redis._transport
import blamequeue_redis._wire
from blamequeue._accelerators import PORTABLE_ENV
from blamequeue._clock import SystemClock
from blamequeue.abc import BackendContext
from blamequeue_redis import RedisBackend
from blamequeue_redis._accelerators import loop_idle, stream_takeover
from blamequeue_redis._resp import Incomplete, parse_error, parse_reply
from blamequeue_redis._scripts import Script
from blamequeue_redis._transport import Transport
from blamequeue_redis._wire import Wire, can_take_over

pytestmark = pytest.mark.anyio

_TYPED = Script(
    "typed",
    """
if ARGV[1] == '3' then redis.setresp(3) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', '1', 'b', 'two')
return {
  1, -7, 3.9, 'text', '', false, true,
  {},
  {'nested', {2, 'deeper'}},
  redis.status_reply('FINE'),
  redis.call('HGETALL', KEYS[1]),
  {map = {k = 'v'}},
  {double = 1.5},
  'caf\\195\\169 \\226\\130\\172',
}
""",
)
_ECHO = Script("echo", "return ARGV[1]")
_NIL = Script("nil", "return nil")
_FAILS = Script("fails", "return redis.error_reply('BOOM the script said no')")


def portable_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``BLAMEQUEUE_PORTABLE=1`` for this test, its accelerators probed afresh (and probed as
    before once it ends)."""
    monkeypatch.setenv(PORTABLE_ENV, "1")
    for probe in (stream_takeover, loop_idle):
        monkeypatch.setattr(probe, "_found", {})


def accelerated_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerators probed afresh with ``BLAMEQUEUE_PORTABLE`` unset (whatever the
    environment of the test run says)."""
    monkeypatch.delenv(PORTABLE_ENV, raising=False)
    for probe in (stream_takeover, loop_idle):
        monkeypatch.setattr(probe, "_found", {})


@pytest.fixture(
    params=[
        ("2", 200, False),
        ("3", 200, False),
        ("2", 0, False),
        ("2", 200, True),
        ("3", 200, True),
    ],
    ids=["resp2", "resp3", "resp2-loop-only", "resp2-portable", "resp3-portable"],
)
async def transport(
    redis_url: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Transport]:
    protocol, reply_poll_us, portable = request.param
    if portable:
        portable_path(monkeypatch)
    else:
        accelerated_path(monkeypatch)
    url = f"{redis_url}?protocol={protocol}"
    backend = RedisBackend(
        {"url": url, "reply_poll_us": reply_poll_us},
        BackendContext(name="r", clock=SystemClock()),
    )
    await backend.open()
    try:
        yield backend._boundary.require()
    finally:
        await backend.close()


async def _as_redis_py_reads_it(transport: Transport, script: Script, args: list[Any]) -> Any:
    return await transport.command("EVALSHA", script.sha, 1, "{t}h", *args)


@pytest.mark.parametrize("script_resp", ["2", "3"])
async def test_every_reply_type_comes_back_as_redis_py_types_it(
    transport: Transport, script_resp: str
) -> None:
    got = await transport.script(_TYPED, ["{t}h"], [script_resp])
    assert got == await _as_redis_py_reads_it(transport, _TYPED, [script_resp])
    assert got[:8] == [1, -7, 3, "text", "", got[5], got[6], []]
    assert got[-1] == "café €"


@pytest.mark.parametrize("size", [0, 1, 70_000, 3_000_000])
async def test_a_reply_is_read_whole_however_many_pieces_it_arrives_in(
    transport: Transport, size: int
) -> None:
    text = ("0123456789\r\n" * (size // 12 + 1))[:size]
    assert await transport.script(_ECHO, ["{t}h"], [text]) == text
    assert await transport.script(_NIL, ["{t}h"], []) is None


async def test_an_error_reply_is_raised_and_the_next_call_is_answered(
    transport: Transport,
) -> None:
    with pytest.raises(ResponseError, match="BOOM the script said no"):
        await transport.scripts(
            [(_ECHO, ["{t}h"], ["first"]), (_FAILS, ["{t}h"], []), (_ECHO, ["{t}h"], ["x"])]
        )
    assert await transport.script(_ECHO, ["{t}h"], ["after"]) == "after"


async def test_an_idle_connection_the_server_closed_does_not_fail_the_next_call(
    transport: Transport, redis_client: redis.Redis
) -> None:
    assert await transport.script(_ECHO, ["{t}h"], ["before"]) == "before"
    # What a server restart does to every idle connection, without the restart.
    assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
    # The wires look at the socket itself; redis-py's pool (the portable path) sees the close
    # once the server has made it and the event loop has read it, as both have long before a
    # restarted server answers.
    with anyio.fail_after(10):
        while True:  # the server closes a killed client's socket a moment after replying
            if len(redis_client.client_list(_type="normal")) == 1:  # only redis_client's
                break
            await anyio.sleep(0.001)
    for _ in range(2):  # a turn to read the socket, one to hand its end to the stream
        await anyio.lowlevel.checkpoint()
    assert await transport.script(_ECHO, ["{t}h"], ["after"]) == "after"


# ~0.3 s of Lua: far longer than the test's poll (50 ms).
_SLOW = Script("slow", "local n = 0 for i = 1, 30000000 do n = n + 1 end return n")


async def test_a_reply_is_polled_for_only_while_replies_of_its_kind_come_quickly(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    polled: list[bool] = []
    poll_reply = Wire._poll_reply

    def spy(wire: Wire, waiter: Any, deadline: float) -> None:
        poll_reply(wire, waiter, deadline)
        polled.append(waiter.done())

    monkeypatch.setattr(Wire, "_poll_reply", spy)
    monkeypatch.setattr(blamequeue_redis._wire, "_cores", lambda: 2)
    accelerated_path(monkeypatch)
    backend = RedisBackend(
        {"url": redis_url, "reply_poll_us": 10_000}, BackendContext(name="r", clock=SystemClock())
    )
    await backend.open()
    try:
        transport = backend._boundary.require()
        held = getattr(transport, "_held", None)  # the thread transport (trio) has none
        if held is not None:
            # Longer than the option allows, so that a quick reply on a loaded machine (this
            # process descheduled for a few ms) still comes within the poll.
            monkeypatch.setattr(held, "_reply_poll", 0.05)
        # Loaded first: a script the server does not know yet is answered NOSCRIPT and sent
        # again (a second reply polled for), whatever tests ran before on this server.
        await transport.load([_ECHO, _SLOW])
        for _ in range(3):
            assert await transport.script(_ECHO, ["{t}h"], ["quick"]) == "quick"
        if anyio_backend == "trio":  # calls go through worker threads: nothing polls
            assert polled == []
            return
        assert polled == [True, True, True]  # each reply read by polling, not by the loop
        polled.clear()
        # A script running longer than the poll: polled for once, in vain; its next call
        # sleeps in the loop at once, while a quick script is still polled for.
        for _ in range(2):
            assert await transport.script(_SLOW, ["{t}h"], []) == 30_000_000
        assert await transport.script(_ECHO, ["{t}h"], ["quick"]) == "quick"
        assert polled == [False, True]
    finally:
        await backend.close()


async def test_a_machine_of_one_core_never_polls(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Polling there would keep the server from the core it needs to answer.
    monkeypatch.setattr(Wire, "_poll_reply", _never)
    monkeypatch.setattr(blamequeue_redis._wire, "_cores", lambda: 1)
    backend = RedisBackend({"url": redis_url}, BackendContext(name="r", clock=SystemClock()))
    await backend.open()
    try:
        assert await backend._boundary.require().script(_ECHO, ["{t}h"], ["x"]) == "x"
    finally:
        await backend.close()


def _never(*args: Any) -> None:
    raise AssertionError("an accelerator was used")


# -- the accelerators' probes accept the installed redis-py and asyncio -----------------------
@pytest.mark.parametrize(
    "connection_class",
    [
        redis.asyncio.connection.Connection,
        redis.asyncio.connection.SSLConnection,
        redis.asyncio.connection.UnixDomainSocketConnection,
    ],
)
def test_the_takeover_probe_accepts_the_installed_redis_py(
    connection_class: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerated_path(monkeypatch)
    pool = redis.asyncio.ConnectionPool(connection_class=connection_class)
    assert stream_takeover(pool.connection_class, pool.make_connection) is not None


async def test_the_reply_polling_probe_accepts_asyncio_s_loop(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if anyio_backend == "trio":  # only the asyncio transport polls
        return
    import asyncio

    accelerated_path(monkeypatch)
    loop = asyncio.get_running_loop()
    idle = loop_idle(loop)
    assert idle is not None
    handle = loop.call_soon(lambda: None)
    assert not idle(loop)
    handle.cancel()


def test_the_reply_polling_probe_refuses_a_loop_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class OtherLoop:  # as another event loop implementation might be: no _ready queue
        pass

    accelerated_path(monkeypatch)
    assert loop_idle(OtherLoop()) is None


async def test_a_loop_it_does_not_know_never_polls(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerated_path(monkeypatch)
    monkeypatch.setattr(loop_idle, "_probe", lambda loop: _never())
    monkeypatch.setattr(Wire, "_poll_reply", _never)
    monkeypatch.setattr(blamequeue_redis._wire, "_cores", lambda: 2)
    backend = RedisBackend({"url": redis_url}, BackendContext(name="r", clock=SystemClock()))
    await backend.open()
    try:
        for _ in range(3):
            assert await backend._boundary.require().script(_ECHO, ["{t}h"], ["x"]) == "x"
    finally:
        await backend.close()


def test_only_connections_with_a_stream_to_take_over_are_taken_over(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerated_path(monkeypatch)

    class Unknown:  # as a future redis-py might make them: no stream writer
        def __init__(self, **kwargs: Any) -> None:
            self.encoder = redis.asyncio.connection.Encoder("utf-8", "strict", True)
            self._reader = None

    pool = redis.asyncio.ConnectionPool.from_url(redis_url)
    assert can_take_over(pool)
    pool.connection_class = Unknown
    assert not can_take_over(pool)


async def test_the_portable_path_leaves_scripts_to_redis_py(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    portable_path(monkeypatch)
    monkeypatch.setattr(Wire, "__init__", _never)  # no connection is taken over
    backend = RedisBackend({"url": redis_url}, BackendContext(name="r", clock=SystemClock()))
    await backend.open()
    try:
        transport = backend._boundary.require()
        # No held wires (the thread transport of trio never has any).
        assert getattr(transport, "_held", None) is None
        assert await transport.script(_ECHO, ["{t}h"], ["via redis-py"]) == "via redis-py"
        with pytest.raises(ResponseError, match="BOOM"):
            await transport.script(_FAILS, ["{t}h"], [])
    finally:
        await backend.close()


# -- the parser on its own ------------------------------------------------------------------
def _text(data: bytes) -> str:
    return data.decode("utf-8")


_REPLIES: list[tuple[bytes, Any]] = [
    (b"+OK\r\n", "OK"),
    (b"$5\r\nhe\r\no\r\n", "he\r\no"),
    (b"$0\r\n\r\n", ""),
    (b"$-1\r\n", None),
    (b"*-1\r\n", None),
    (b"_\r\n", None),
    (b":-42\r\n", -42),
    (b"(12345678901234567890123\r\n", 12345678901234567890123),
    (b",2.5\r\n", 2.5),
    (b"#t\r\n", True),
    (b"#f\r\n", False),
    (b"=8\r\ntxt:four\r\n", "four"),
    (b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n_\r\n", [1, ["x"], None]),
    (b"~2\r\n+a\r\n+b\r\n", ["a", "b"]),
    (b"%2\r\n+k\r\n:1\r\n+m\r\n*0\r\n", {"k": 1, "m": []}),
    # Out of band: a push message before the reply, attributes of the reply.
    (b">2\r\n+invalidate\r\n*1\r\n+key\r\n:7\r\n", 7),
    (b"|1\r\n+ttl\r\n:3600\r\n$5\r\nvalue\r\n", "value"),
]


@pytest.mark.parametrize(("raw", "value"), _REPLIES)
def test_each_reply_type_is_parsed_and_needs_every_byte(raw: bytes, value: Any) -> None:
    assert parse_reply(raw, 0, _text) == (value, len(raw))
    assert parse_reply(b"junk" + raw + b"+next\r\n", 4, _text) == (value, 4 + len(raw))
    for cut in range(len(raw)):
        with pytest.raises(Incomplete):
            parse_reply(raw[:cut], 0, _text)


def test_replies_stay_bytes_when_the_client_does_not_decode() -> None:
    assert parse_reply(b"*2\r\n$2\r\nab\r\n+OK\r\n", 0, None) == ([b"ab", b"OK"], 17)


_ERROR_REPLIES = [
    "NOSCRIPT No matching script. Please use EVAL.",
    "BOOM the script said no",
    "ERR Error running script",
    "ERR max number of clients reached",
    "ERR invalid password",
    "WRONGPASS invalid username-password pair or user is disabled.",
    "NOAUTH Authentication required.",
    "NOPERM this user has no permissions to run the 'evalsha' command",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "LOADING Redis is loading the dataset in memory",
    "READONLY You can't write against a read only replica.",
    "EXECABORT Transaction discarded because of previous errors.",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "CLUSTERDOWN The cluster is down",
    "CROSSSLOT Keys in request don't hash to the same slot",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "lowercase code stays whole",
    "",
]


@pytest.mark.parametrize("text", _ERROR_REPLIES)
def test_error_replies_are_typed_as_the_installed_redis_py_types_them(text: str) -> None:
    # redis-py's own table is private: compared here, so an upgrade that changes it is seen.
    from redis._parsers.base import BaseParser

    theirs, ours = BaseParser.parse_error(text), parse_error(text)
    code = text.partition(" ")[0]
    if code in BaseParser.EXCEPTION_CLASSES or code not in blamequeue_redis._resp.ERROR_CLASSES:
        assert (type(ours), ours.args) == (type(theirs), theirs.args)
    else:  # a code this redis-py types only in its cluster client (older releases): narrower
        assert isinstance(ours, ResponseError)
        assert ours.args == (text.partition(" ")[2],)


def test_error_replies_become_redis_py_exceptions() -> None:
    error, end = parse_reply(b"-NOSCRIPT No matching script.\r\n", 0, _text)
    assert isinstance(error, NoScriptError)
    assert end == 31
    error, _ = parse_reply(b"!21\r\nSYNTAX invalid syntax\r\n", 0, _text)
    assert isinstance(error, ResponseError)
    assert str(error) == "SYNTAX invalid syntax"


def test_an_unknown_type_byte_is_a_protocol_error() -> None:
    with pytest.raises(redis.exceptions.InvalidResponse, match="type byte '@'"):
        parse_reply(b"@1\r\n", 0, _text)
