"""The stream transport: RESP over anyio byte streams, the backend's own client on trio.

redis-py's sync client in worker threads (:class:`~blamequeue_redis._transport.ThreadTransport`)
costs a thread hand-off and the GIL's contention on every call.  This transport speaks to a single
server itself, as anyio code (so on trio, and on asyncio in its tests): a TCP stream
(:func:`anyio.connect_tcp`, TLS included) or a unix socket (:func:`anyio.connect_unix`), requests
packed and replies parsed by :mod:`blamequeue_redis._resp`.

**Settings.**  What the URL and the options ask for is read from a redis-py sync client built
by :class:`~blamequeue_redis._transport.ClientSettings` (no connection is made): its pool's
``connection_kwargs``.  Each new connection makes the handshake redis-py would: ``HELLO 3``
(with its credentials) when the URL asks for RESP3 (``protocol=3``), else ``AUTH``; then
``CLIENT SETNAME`` and ``SELECT``.  Settings this transport does not carry out (a credential
provider, a TLS option it does not know) make :func:`stream_settings` answer ``None``: the
backend then uses the thread transport.  The same sync client serves ``listen`` (pub/sub,
through the thread listener).

**Connections.**  At most :data:`~blamequeue_redis._transport.POOL_SIZE` commands are in flight,
each on a connection of the pool's for one exchange (one write, then every reply read).  A
connection whose exchange did not end cleanly (the caller was cancelled between request and
reply, the network failed, a reply could not be parsed) is closed, never used again with a
reply pending; one found readable while idle (the server closed it) is replaced.

**Blocking waits** run on connections of their own, as on the other transports: a cancelled
wait is ended from the pool with ``CLIENT UNBLOCK`` (see
:func:`~blamequeue_redis._transport._unblockable_reply`): the reply is read in the caller's
task, and a read cut by a cancellation is resumed (nothing is lost).
"""

from __future__ import annotations

import contextlib
import functools
import select
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio
import anyio.abc
import anyio.streams.tls
import redis
import redis.exceptions
from redis.exceptions import NoScriptError

from blamequeue_redis._resp import Decode, Incomplete, pack, parse_reply, unusable
from blamequeue_redis._scripts import Script
from blamequeue_redis._transport import (
    CONNECT_TIMEOUT,
    POOL_SIZE,
    SOCKET_TIMEOUT,
    Abandoned,
    Commands,
    Listener,
    ScriptCall,
    ThreadTransport,
    Transport,
    _eval,
    _evalsha,
    _lent,
    _semaphore,
    _unblockable_reply,
    current_library,
)
from blamequeue_redis._wire import _cores

__all__ = ["Connection", "StreamSettings", "StreamTransport", "stream_settings"]

_READ_SIZE: Final = 262144
#: Whether the event loop has nothing else ready to run.
Idle = Callable[[], bool]
#: Connection settings this transport cannot carry out: given (not None), the thread transport
#: is used.  Every other TLS setting (``ssl_...``) not in :data:`_TLS` counts as one.
_FOREIGN: Final = ("credential_provider", "redis_connect_func", "command_packer")
_TLS: Final = frozenset(
    {
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_check_hostname",
    }
)
_CERT_REQS: Final = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


#: What a lost connection raises from an anyio stream.
_LOST: Final = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


class StreamSettings:
    """Where and how the stream transport connects (from a redis-py pool's settings)."""

    def __init__(
        self, kwargs: Mapping[str, Any], *, protocol: int, tls: ssl.SSLContext | None
    ) -> None:
        self.host: str = str(kwargs.get("host") or "localhost")
        self.port = int(kwargs.get("port") or 6379)
        self.path: str | None = kwargs.get("path")
        self.tls = tls
        self.keepalive: dict[int, int] = (
            dict(kwargs.get("socket_keepalive_options") or {})
            if kwargs.get("socket_keepalive")
            else {}
        )
        self.connect_timeout = float(kwargs.get("socket_connect_timeout") or CONNECT_TIMEOUT)
        encoding = kwargs.get("encoding") or "utf-8"
        errors = kwargs.get("encoding_errors") or "strict"
        self.decode: Decode = (
            (lambda data: data.decode(encoding, errors)) if kwargs.get("decode_responses") else None
        )
        self.handshake = _handshake(kwargs, protocol)
        #: The handshake for a server that does not know HELLO (older than Redis 6).
        self.resp2_handshake = _handshake(kwargs, 2)


def _handshake(kwargs: Mapping[str, Any], protocol: int) -> list[tuple[Any, ...]]:
    """The commands redis-py sends on a new connection for these settings (HELLO, or AUTH,
    then CLIENT SETNAME and SELECT)."""
    username, password = kwargs.get("username"), kwargs.get("password")
    commands: list[tuple[Any, ...]] = []
    if protocol == 3:
        auth = ("AUTH", username or "default", password) if password else ()
        commands.append(("HELLO", 3, *auth))
    elif password:
        commands.append(("AUTH", username, password) if username else ("AUTH", password))
    if kwargs.get("client_name"):
        commands.append(("CLIENT", "SETNAME", kwargs["client_name"]))
    if int(kwargs.get("db") or 0):
        commands.append(("SELECT", int(kwargs["db"])))
    return commands


def _tls_context(probe: Any) -> ssl.SSLContext:
    """The TLS context redis-py's SSL connection ``probe`` (never connected) would make."""
    context = ssl.create_default_context()
    reqs = probe.cert_reqs
    if isinstance(reqs, str):
        reqs = _CERT_REQS[reqs.strip().lower()]
    elif reqs is None:
        reqs = ssl.CERT_NONE
    context.check_hostname = bool(probe.check_hostname) and reqs != ssl.CERT_NONE
    context.verify_mode = reqs
    if probe.certfile or probe.keyfile:
        context.load_cert_chain(
            certfile=probe.certfile, keyfile=probe.keyfile, password=probe.certificate_password
        )
    if probe.ca_certs or probe.ca_path or probe.ca_data:
        context.load_verify_locations(
            cafile=probe.ca_certs, capath=probe.ca_path, cadata=probe.ca_data
        )
    return context


def stream_settings(client: Any) -> StreamSettings | None:
    """The settings of ``client`` (a redis-py sync client of one server) when this transport can
    carry them out; ``None`` otherwise (the thread transport is used).  What redis-py defaults
    (the RESP version, TLS checks) is read from a connection it makes but never connects."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return None
    kwargs: Mapping[str, Any] = pool.connection_kwargs
    if any(kwargs.get(name) is not None for name in _FOREIGN) or any(
        name.startswith("ssl_") and name not in _TLS and value not in (None, False)
        for name, value in kwargs.items()
    ):
        return None
    connection_class = pool.connection_class
    if connection_class not in (
        redis.Connection,
        redis.SSLConnection,
        redis.UnixDomainSocketConnection,
    ):
        return None  # a connection class of the caller's
    probe = connection_class(**kwargs)
    protocol = int(getattr(probe, "protocol", None) or 2)
    if protocol not in (2, 3):
        return None
    tls: ssl.SSLContext | None = None
    if connection_class is redis.SSLConnection:
        try:
            tls = _tls_context(probe)
        except (AttributeError, KeyError, ValueError):
            return None
    return StreamSettings(kwargs, protocol=protocol, tls=tls)


def _trio_idle() -> Idle:
    import trio.lowlevel

    statistics = trio.lowlevel.current_statistics
    return lambda: statistics().tasks_runnable == 0


def _lost(exc: BaseException) -> redis.exceptions.ConnectionError:
    return redis.exceptions.ConnectionError(f"connection to Redis lost: {exc!r}")


class Connection:
    """One connection to the server on an anyio byte stream, one exchange at a time.

    :attr:`broken` says an exchange did not end cleanly: the caller must then close it.
    """

    def __init__(self, stream: anyio.abc.ByteStream, decode: Decode) -> None:
        self._stream = stream
        self._decode = decode
        self._rest = b""
        self.broken = False
        self.replied_in = 0.0
        self._want = 0
        self._replies: list[Any] = []
        self._chunks: list[bytes] = []
        self._failure: redis.exceptions.ConnectionError | None = None
        self._sent_at = 0.0
        self._poller: Any = None
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if raw is not None:
            self._poller = select.poll()
            self._poller.register(raw.fileno(), select.POLLIN)
        # Read directly only on trio, whose socket streams keep no buffer of their own (on
        # asyncio the transport's protocol reads the socket), and never under TLS.
        self._raw: socket.socket | None = (
            raw
            if raw is not None
            and current_library() == "trio"
            and stream.extra(anyio.streams.tls.TLSAttribute.ssl_object, None) is None
            else None
        )

    @classmethod
    async def open(cls, settings: StreamSettings) -> Connection:
        """Connect and make the handshake (an error reply to it is raised)."""
        stream: anyio.abc.ByteStream
        try:
            with anyio.fail_after(settings.connect_timeout):
                if settings.path is not None:
                    stream = await anyio.connect_unix(settings.path)
                elif settings.tls is not None:
                    stream = await anyio.connect_tcp(
                        settings.host,
                        settings.port,
                        ssl_context=settings.tls,
                        tls_standard_compatible=False,
                    )
                else:
                    stream = await anyio.connect_tcp(settings.host, settings.port)
        except TimeoutError as exc:
            where = settings.path or f"{settings.host}:{settings.port}"
            raise redis.exceptions.TimeoutError(f"timed out connecting to {where}") from exc
        except (OSError, anyio.BrokenResourceError, ssl.SSLError) as exc:
            where = settings.path or f"{settings.host}:{settings.port}"
            raise redis.exceptions.ConnectionError(f"cannot connect to {where}: {exc}") from exc
        connection = cls(stream, settings.decode)
        try:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
            if raw is not None and settings.keepalive:
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for option, value in settings.keepalive.items():
                    raw.setsockopt(socket.IPPROTO_TCP, option, value)
            handshake = settings.handshake
            with anyio.fail_after(SOCKET_TIMEOUT):
                replies = await connection.exchange(pack(handshake), len(handshake))
                if (
                    handshake
                    and handshake[0][0] == "HELLO"
                    and isinstance(replies[0], redis.exceptions.ResponseError)
                    and "unknown command" in str(replies[0]).lower()
                ):
                    handshake = settings.resp2_handshake  # a server older than Redis 6
                    replies = await connection.exchange(pack(handshake), len(handshake))
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        except BaseException:
            await connection.aclose()
            raise
        return connection

    @property
    def stale(self) -> bool:
        """Broken, or readable while no reply is due: the server closed it (a restart)."""
        if self.broken or self._rest:
            return True
        return self._poller is not None and bool(self._poller.poll(0))

    async def exchange(
        self, packed: bytes, count: int, *, poll: float = 0.0, idle: Idle | None = None
    ) -> list[Any]:
        """Send ``packed`` (``count`` commands) in one write; their ``count`` replies, an error
        reply as its exception.  Cut short (cancelled, a network error), the connection is
        :attr:`broken`.

        ``poll`` > 0 on a plain socket (not TLS) and ``idle()`` true (nothing else is ready to
        run): read the reply by polling the socket for up to ``poll`` seconds before sleeping in
        the event loop (see *Polling for a reply* in docs/backends/redis.md).  :attr:`replied_in`
        is how long the reply took, either way."""
        await self.send(packed, count)
        deadline = None
        if poll > 0 and self._raw is not None and idle is not None and idle():
            deadline = self._sent_at + poll
        return await self.receive(deadline)

    async def send(self, packed: bytes, count: int) -> None:
        """Send ``packed`` (``count`` commands): :meth:`receive` reads their replies."""
        self.broken = True
        self._want, self._replies, self._failure = count, [], None
        self._chunks = [self._rest] if self._rest else []
        self._rest = b""
        self._sent_at = time.perf_counter()
        try:
            await self._stream.send(packed)
        except _LOST as exc:
            self._failure = _lost(exc)
            raise self._failure from exc

    @property
    def replied(self) -> bool:
        """Whether the replies :meth:`send` asked for came (or the connection failed)."""
        return not self.broken or self._failure is not None

    async def receive(self, deadline: float | None = None) -> list[Any]:
        """The replies of the last :meth:`send`.  Cancelling this await loses nothing: await
        again for them (a blocking command ended early by ``CLIENT UNBLOCK`` still replies)."""
        if self._failure is not None:
            raise self._failure
        replies, chunks = self._replies, self._chunks
        try:
            while len(replies) < self._want:
                # A complete reply ends with CRLF: parse only then (a long one comes in parts).
                if chunks and chunks[-1].endswith(b"\r\n"):
                    buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    chunks.clear()
                    pos = 0
                    try:
                        while len(replies) < self._want:
                            item, pos = parse_reply(buf, pos, self._decode)
                            replies.append(item)
                    except Incomplete:
                        chunks.append(buf[pos:])  # the rest of a reply is still to come
                    else:
                        if pos < len(buf):
                            chunks.append(buf[pos:])
                        continue
                data = self._polled(deadline) if deadline is not None else None
                if data is None:
                    deadline = None
                    data = await self._stream.receive(_READ_SIZE)
                chunks.append(data)
        except _LOST as exc:
            self._failure = _lost(exc)
            raise self._failure from exc
        except Exception as exc:  # a malformed reply: the connection is out of step
            self._failure = redis.exceptions.ConnectionError(f"malformed reply: {exc!r}")
            raise self._failure from exc
        self.replied_in = time.perf_counter() - self._sent_at
        self._rest = b"".join(chunks)
        chunks.clear()
        self.broken = False
        return replies

    def _polled(self, deadline: float) -> bytes | None:
        """Bytes read from the (non-blocking) socket before ``deadline``; ``None`` when none
        came in time or the socket failed (the stream then reads, or reports, it)."""
        raw, clock = self._raw, time.perf_counter
        assert raw is not None
        while True:
            try:
                data: bytes = raw.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                if clock() > deadline:
                    return None
                continue
            except OSError:
                return None
            return data or None  # end of stream: left to the stream, which reports it

    async def aclose(self) -> None:
        self.broken = True
        await anyio.aclose_forcefully(self._stream)


class _Waiter:
    """A connection of its own for blocking commands, and its ``CLIENT ID``."""

    def __init__(self, connection: Connection, client_id: int) -> None:
        self.connection = connection
        self.client_id = client_id
        self.clean = False  # as _AsyncWaiter.clean

    async def exchange(
        self, make: Commands, unblock: Callable[[], Awaitable[object]], abandoned: Abandoned
    ) -> list[Any]:
        """The commands ``make`` returns (called as they are sent), their replies read in the
        caller's task; when it is cancelled, the blocking one is ended early through
        ``unblock`` and the replies go to ``abandoned`` (see :func:`_unblockable_reply`)."""
        connection = self.connection
        self.clean = False
        commands = make()
        await connection.send(pack(commands), len(commands))
        try:
            replies = await _unblockable_reply(
                connection.receive, lambda: connection.replied, unblock, abandoned
            )
        finally:
            self.clean = not connection.broken
        fatal = unusable(replies)
        if fatal is not None:
            self.clean = False
            raise fatal
        return replies

    async def close(self) -> None:
        await self.connection.aclose()


class StreamTransport(Transport):
    """RESP over anyio streams to a single server (see the module's text).

    ``client`` is the redis-py sync client whose settings it follows (``settings``); it is used
    only for pub/sub, from worker threads.
    """

    def __init__(
        self, client: Any, settings: StreamSettings, *, owned: bool, reply_poll: float = 0.0
    ) -> None:
        super().__init__(client, owned=owned)
        self._settings = settings
        # Polling for a reply needs a core of its own beside the server's, and is done only on
        # trio (see Connection.exchange), when no other task is ready to run.
        self._reply_poll = reply_poll if _cores() > 1 else 0.0
        self._loop_idle: Idle | None = _trio_idle() if current_library() == "trio" else None
        # Per script (or command): whether its last reply came within the poll (as HeldWires).
        self._quick: dict[Any, bool] = {}
        self._slots = _semaphore(POOL_SIZE)
        self._free: list[Connection] = []
        self._idle: list[_Waiter] = []
        self._threads = ThreadTransport(client, owned=owned)

    async def _checkout(self) -> Connection:
        while self._free:
            connection = self._free.pop()
            if not connection.stale:
                return connection
            await connection.aclose()  # connect afresh, as redis-py's pool does
        return await Connection.open(self._settings)

    async def exchange(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """``commands`` in one write on a pooled connection; their replies (an error reply as
        its exception, not raised)."""
        packed = pack(commands)
        async with self._slots:
            try:
                connection = await self._checkout()
            except redis.exceptions.ConnectionError:
                await self._server_gone()
                raise
            kind = commands[0][1] if commands[0][0] == "EVALSHA" else commands[0][0]
            poll = self._reply_poll if self._quick.get(kind, True) else 0.0
            try:
                replies = await connection.exchange(
                    packed, len(commands), poll=poll, idle=self._loop_idle
                )
                if self._reply_poll:
                    self._quick[kind] = connection.replied_in <= self._reply_poll
                fatal = unusable(replies)
                if fatal is not None:
                    raise fatal
            except BaseException as exc:
                await connection.aclose()
                if isinstance(exc, redis.exceptions.ConnectionError):
                    await self._server_gone()
                raise
            self._free.append(connection)
        return replies

    async def _server_gone(self) -> None:
        """Every idle connection to a server that went away is dead too."""
        free, self._free = self._free, []
        for connection in free:
            await connection.aclose()

    async def command(self, *args: Any) -> Any:
        (reply,) = await self.exchange([args])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return (await self.scripts([(script, keys, args)]))[0]

    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        if not calls:
            return []
        replies = await self.exchange([_evalsha(*call) for call in calls])
        for n, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                # EVAL loads the script again (a restart or SCRIPT FLUSH forgot it).
                reply = replies[n] = (await self.exchange([_eval(*calls[n])]))[0]
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def load(self, scripts: Sequence[Script]) -> None:
        if not scripts:
            return
        replies = await self.exchange([("SCRIPT", "LOAD", script.source) for script in scripts])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply

    async def listen(self, channels: Sequence[str]) -> Listener:
        return await self._threads.listen(channels)

    async def _checkout_waiter(self) -> _Waiter:
        while self._idle:
            waiter = self._idle.pop()
            if not waiter.connection.stale:
                return waiter
            await waiter.close()
        connection = await Connection.open(self._settings)
        try:
            with anyio.fail_after(SOCKET_TIMEOUT):
                (client_id,) = await connection.exchange(pack([("CLIENT", "ID")]), 1)
            if isinstance(client_id, Exception):
                raise client_id
        except BaseException:
            await connection.aclose()
            raise
        return _Waiter(connection, int(client_id))

    async def _on_waiter(self, key: str, make: Commands, abandoned: Abandoned = None) -> list[Any]:
        waiter = await self._checkout_waiter()
        async with _lent(waiter, functools.partial(self._idle.append, waiter), waiter.close):
            return await waiter.exchange(
                make, lambda: self.command("CLIENT", "UNBLOCK", waiter.client_id), abandoned
            )

    async def aclose(self) -> None:
        waiters, self._idle = self._idle, []
        for waiter in waiters:
            await waiter.close()
        await self._server_gone()
        with contextlib.suppress(Exception):
            await self._threads.aclose()
