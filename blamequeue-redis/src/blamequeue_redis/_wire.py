"""Connections the asyncio transport holds for its scripts (asyncio only).

A script call is one request and one reply, so it needs none of what redis-py's connection does
per command (its generic encoder, a coroutine per reply element, the stream reader's buffer
and locking): about half of a single enqueue's client CPU went there.  So the transport lets
redis-py open and set up a connection (TLS, AUTH, SELECT, client name: whatever the URL asks
for), then takes its socket over: :class:`Wire` becomes the transport's protocol, writes the
request packed in one buffer and parses replies (RESP2 or RESP3) as they arrive.

Taking a connection over, and polling the socket for a reply while the loop has nothing else
to do, reach names redis-py and asyncio do not promise to keep: both are accelerators
(:mod:`blamequeue_redis._accelerators`), probed when a transport opens.  Without them the
transport leaves scripts to redis-py's public client.  The RESP parser and the mapping of error
replies to redis-py's exceptions (:mod:`blamequeue_redis._resp`, shared with the stream
transport of trio) use public names only.

The asyncio module is imported here on purpose: this is the asyncio transport's own I/O (on
trio the backend speaks over anyio streams, :mod:`blamequeue_redis._streams`).
"""

from __future__ import annotations

import asyncio
import os
import select
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import redis.exceptions

from blamequeue_redis._accelerators import StreamTakeover, loop_idle, stream_takeover
from blamequeue_redis._resp import Decode, Incomplete, pack, parse_error, parse_reply, unusable

__all__ = ["HeldWires", "can_take_over", "pack", "parse_error", "unusable"]

_READ_SIZE = 262144  # asyncio's own read size
LoopIdle = Callable[[asyncio.AbstractEventLoop], bool]


def _decoder(connection: Any) -> Decode:
    encoder = connection.encoder
    if not encoder.decode_responses:
        return None
    encoding, errors = encoder.encoding, encoder.encoding_errors
    return lambda data: data.decode(encoding, errors)


def can_take_over(pool: Any) -> bool:
    """Whether the transport may take over ``pool``'s connections (the stream takeover
    accelerator fits them, and ``BLAMEQUEUE_PORTABLE`` is not set).  Else scripts go through
    redis-py."""
    return stream_takeover(pool.connection_class, pool.make_connection) is not None


class Wire(asyncio.Protocol):
    """One connection taken over from redis-py: the asyncio protocol of its transport.

    One exchange at a time (the caller holds the wire while it waits).  Bytes arriving with no
    exchange waiting mean the connection is out of step (or the server closed it): the wire is
    then stale and is never used again.
    """

    def __init__(self, connection: Any, takeover: StreamTakeover) -> None:
        self._transport: Any = takeover.take(connection)
        # Kept so that the stream objects (which close their transport when collected on newer
        # Pythons) live as long as the wire does.
        self._connection = connection
        self._takeover = takeover
        self._decode = _decoder(connection)
        self._chunks: list[bytes] = []
        self._replies: list[Any] = []
        self._want = 0
        self._sent_at = 0.0
        self.replied_in = 0.0
        self._waiter: asyncio.Future[list[Any]] | None = None
        self.lost: BaseException | None = None
        self._transport.set_protocol(self)
        # Registered once: stale runs before every exchange.
        self._poller: Any = None
        self._fd: int | None = None
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            self._poller = select.poll()
            self._poller.register(sock.fileno(), select.POLLIN)
            if self._transport.get_extra_info("sslcontext") is None:
                self._fd = sock.fileno()

    @property
    def stale(self) -> bool:
        """Closed, out of step, or (checked on the socket itself, as the event loop may not have
        looked yet) readable while no reply is due: the server closed it (a restart)."""
        if self.lost is not None or self._chunks or self._transport.is_closing():
            return True
        return self._poller is not None and bool(self._poller.poll(0))

    async def exchange(
        self, packed: bytes, count: int, *, poll: float = 0.0, idle: LoopIdle | None = None
    ) -> list[Any]:
        """Send ``packed`` (``count`` commands) and return their ``count`` replies.

        ``poll`` > 0 and ``idle`` (the reply polling accelerator, :func:`loop_idle`) given:
        when it says the event loop has nothing else ready to run, read the reply by
        polling the socket for up to ``poll`` seconds before sleeping in the loop.  On the
        2-core VMs we measure on, a loopback reply then arrives in ~25 us instead of ~100 (the
        loop's sleep and wake-up cost the rest); the CPU it burns is time the loop would have
        slept.
        :attr:`replied_in` is how long the reply took, either way."""
        loop = asyncio.get_running_loop()
        waiter = self.send(packed, count)
        # Only a request sent whole has a reply to wait for.
        if (
            poll > 0
            and idle is not None
            and self._fd is not None
            and idle(loop)
            and not self._transport.get_write_buffer_size()
        ):
            self._poll_reply(waiter, self._sent_at + poll)
            if waiter.done():
                return waiter.result()
        return await waiter

    def send(self, packed: bytes, count: int) -> asyncio.Future[list[Any]]:
        """Send ``packed`` (``count`` commands); the future of their ``count`` replies."""
        if self.lost is not None or self._transport.is_closing():
            raise redis.exceptions.ConnectionError(f"connection to Redis lost: {self.lost}")
        waiter: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._waiter, self._want, self._replies = waiter, count, []
        self._sent_at = time.perf_counter()
        self._transport.write(packed)
        return waiter

    @staticmethod
    async def receive(replies: asyncio.Future[list[Any]]) -> list[Any]:
        """The replies :meth:`send` promised.  Cancelling this await leaves them coming: await
        again for them (a blocking command ended early by ``CLIENT UNBLOCK`` still replies)."""
        return await asyncio.shield(replies)

    def _poll_reply(self, waiter: asyncio.Future[list[Any]], deadline: float) -> None:
        """Feed :meth:`data_received` from the socket until the reply is whole or ``deadline``
        passes (then the event loop delivers the rest, as it would have all of it)."""
        fd, ready, clock = self._fd, self._poller.poll, time.perf_counter
        assert fd is not None
        while not waiter.done():
            if not ready(0):
                if clock() > deadline:
                    return
                continue
            try:
                data = os.read(fd, _READ_SIZE)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # the transport reads the same fault and reports it
                return
            if not data:  # end of stream: left to the transport, which reports it
                return
            self.data_received(data)

    def close(self) -> None:
        """Close at once (a reply that may still come is never read, nor waited for)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.cancel()
        self._transport.abort()
        self._takeover.release(self._connection)

    # -- asyncio protocol --------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        waiter = self._waiter
        # A complete reply always ends with CRLF: parse only then (a long one comes in parts).
        if waiter is None or not data.endswith(b"\r\n"):
            return
        buf = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        replies, pos = self._replies, 0
        try:
            while len(replies) < self._want:
                item, pos = parse_reply(buf, pos, self._decode)
                replies.append(item)
        except Incomplete:
            self._chunks = [buf[pos:]] if pos < len(buf) else []
            return
        except Exception as exc:  # a malformed reply: the connection is out of step
            self._waiter = None
            self.lost = exc
            if not waiter.done():
                waiter.set_exception(exc)
            return
        self._chunks = [buf[pos:]] if pos < len(buf) else []
        self._waiter = None
        self.replied_in = time.perf_counter() - self._sent_at
        if not waiter.done():  # else cancelled: the caller closes the wire
            waiter.set_result(replies)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = exc or redis.exceptions.ConnectionError("Connection closed by server.")
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            error = redis.exceptions.ConnectionError(f"connection to Redis lost: {self.lost}")
            waiter.set_exception(error)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def pause_writing(self) -> None:
        # One request per wire at a time: the transport buffers it whole.
        pass

    def resume_writing(self) -> None:
        pass


def _cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class HeldWires:
    """Wires to a single server's pool kept by the transport for scripts, at most ``limit``.

    A wire whose exchange did not end cleanly (a network error, a cancellation between request
    and reply) is closed, never reused with a reply pending; an error *reply* leaves it
    healthy.
    """

    def __init__(
        self, pool: Any, takeover: StreamTakeover, limit: int, *, reply_poll: float = 0.0
    ) -> None:
        self._pool = pool
        self._takeover = takeover
        self._free: list[Wire] = []
        # At most `limit` wires (so commands in flight); a call finding none free and none to
        # open waits for one to come back.
        self._limit = limit
        self._open = 0
        self._waiting = 0
        self._returned = anyio.Event()
        # Polling for a reply (Wire.exchange) needs a core of its own beside the server's.
        self._reply_poll = reply_poll if _cores() > 1 else 0.0
        # Whether the loop has nothing else to run (the reply polling accelerator), looked up
        # at the first exchange (it needs the running loop); None: never poll.
        self._idle: LoopIdle | None = None
        self._idle_probed = False
        # Per script (or command): whether its last reply came within the poll, so that polling
        # for the next one is likely to pay.  An enqueue that wakes a blocked consumer is
        # answered only after Redis has served that consumer, a server far away only after
        # the network: polling for those would only burn CPU.
        self._quick: dict[Any, bool] = {}

    async def _checkout(self) -> Wire:
        while True:
            while not self._free and self._open >= self._limit:
                self._waiting += 1
                try:
                    await self._returned.wait()
                finally:
                    self._waiting -= 1
            if not self._free:
                break
            wire = self._free.pop()
            if not wire.stale:
                return wire
            # The server closed it while it sat idle (a restart): connect afresh, as the
            # client's own pool does, rather than fail a call on a dead socket.
            wire.close()
            self._open -= 1
        self._open += 1
        try:
            connection = self._pool.make_connection()
            await connection.connect()
            return Wire(connection, self._takeover)
        except BaseException:
            self._checkin(None)
            raise

    def _checkin(self, wire: Wire | None) -> None:
        """Give a wire back (``None``: it was closed)."""
        if wire is None:
            self._open -= 1
        else:
            self._free.append(wire)
        if self._waiting:
            self._returned.set()
            self._returned = anyio.Event()

    async def exchange(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one write and read their replies in order (an error reply
        is returned as its exception, not raised)."""
        packed = pack(commands)
        try:
            wire = await self._checkout()
        except (OSError, redis.exceptions.ConnectionError):
            await self._server_gone()
            raise
        kind = commands[0][1] if commands[0][0] == "EVALSHA" else commands[0][0]
        poll = self._reply_poll if self._quick.get(kind, True) else 0.0
        if poll and not self._idle_probed:
            self._idle_probed = True
            self._idle = loop_idle(asyncio.get_running_loop())
        try:
            replies = await wire.exchange(packed, len(commands), poll=poll, idle=self._idle)
            self._quick[kind] = wire.replied_in <= self._reply_poll
            fatal = unusable(replies)
            if fatal is not None:
                raise fatal
        except BaseException as exc:
            wire.close()
            self._checkin(None)
            if isinstance(exc, (OSError, redis.exceptions.ConnectionError)):
                await self._server_gone()
            raise
        self._checkin(wire)
        return replies

    async def _server_gone(self) -> None:
        """Every idle connection to a server that went away is dead too, the client pool's
        included (it does not always notice on checkout)."""
        self.close()
        with anyio.CancelScope(shield=True):
            await self._pool.disconnect(inuse_connections=False)

    def close(self) -> None:
        wires, self._free = self._free, []
        self._open -= len(wires)
        for wire in wires:
            wire.close()
