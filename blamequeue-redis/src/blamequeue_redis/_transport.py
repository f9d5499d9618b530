"""The transport seam: how the backend talks to Redis on asyncio and on trio.

redis-py's asyncio client runs only on asyncio, so the backend talks through the small
:class:`Transport` interface, with implementations picked at ``open()`` by the running event
loop:

* :class:`AsyncioTransport`: redis-py's asyncio client (``redis.asyncio``), on asyncio;
* :class:`~blamequeue_redis._streams.StreamTransport`: the backend's own RESP over anyio
  streams, on trio for a single server (the ``trio_transport`` option's default);
* :class:`ThreadTransport`: redis-py's sync client in anyio worker threads, bounded by an
  explicit :class:`anyio.CapacityLimiter` (the size of its connection pool), on trio for a
  cluster or with ``trio_transport: "threads"`` (and on asyncio when the caller hands in a sync
  client).

Both speak to a single server or, with the cluster clients, to a Redis Cluster.  Scripts are
called by SHA (``EVALSHA``); a server that forgot them (restart, ``SCRIPT FLUSH``, a new cluster
node) answers ``NOSCRIPT`` and the call is repeated once with ``EVAL``, which loads the script
again.

**Blocking waits.**  An idle consumer waits with a blocking pop (``BLMOVE``) on its queue's
signal list, on a connection of its own (a blocked connection can do nothing else).  When the
wait is cancelled (work came from this process, the consumer stops), cancelling a read half-way
would leave the connection unusable, so the pop runs shielded (on asyncio: its reply, read by a
wire, is awaited again) and the transport ends it from another connection with
``CLIENT UNBLOCK``: once its replies are read, the dedicated connection is reused.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, ResponseError

from blamequeue_redis._accelerators import StreamTakeover, stream_takeover
from blamequeue_redis._scripts import Script
from blamequeue_redis._wire import HeldWires, Wire, pack, unusable

__all__ = [
    "AsyncioTransport",
    "ClientSettings",
    "Listener",
    "ScriptCall",
    "ThreadTransport",
    "Transport",
    "current_library",
    "is_async_client",
    "is_cluster_client",
    "is_sync_client",
]

T = TypeVar("T")
log = logging.getLogger("blamequeue")

#: Connections a transport keeps for commands (and worker threads it uses at once).
POOL_SIZE: Final = 16
#: Worker threads the thread transport lets block in BLPOP at once.
WAIT_THREADS: Final = 64
#: Seconds before a command's reply is given up on (the server is then deemed unavailable), on
#: the thread transport.  The asyncio client sets no per-command timeout (redis-py would start
#: a task per command for it, a third of a round trip's cost); a dead peer is noticed through
#: TCP keepalive and TCP_USER_TIMEOUT (below) instead.
SOCKET_TIMEOUT: Final = 10.0
CONNECT_TIMEOUT: Final = 5.0
#: Notice a vanished server or network within ~15 s, also while a reply is awaited.
_TCP_OPTIONS: Final = {
    option: value
    for name, value in (
        ("TCP_KEEPIDLE", 5),
        ("TCP_KEEPINTVL", 2),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", 15_000),
    )
    if (option := getattr(socket, name, None)) is not None
}
#: The longest single BLPOP; a longer wait simply returns early (allowed by the contract).
MAX_BLOCK: Final = 30.0
#: How long a cancelled wait keeps asking the server to unblock its pop before giving up.
_UNBLOCK_DEADLINE: Final = MAX_BLOCK + 5.0
_UNBLOCK_PAUSE: Final = 0.005

ScriptCall = tuple[Script, Sequence[str], Sequence[Any]]
"""A script with its ``KEYS`` and ``ARGV``."""
#: What a waiter connection sends (made as it is sent; the last command blocks).
Commands = Callable[[], Sequence[Sequence[Any]]]
#: Where the replies go when the caller of a blocking command was cancelled.
Abandoned = Callable[[list[Any]], Awaitable[None]] | None

_ASYNC_CLIENTS: Final = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
_SYNC_CLIENTS: Final = (redis.Redis, redis.cluster.RedisCluster)
_CLUSTER_CLIENTS: Final = (redis.asyncio.cluster.RedisCluster, redis.cluster.RedisCluster)


def is_async_client(client: object) -> bool:
    return isinstance(client, _ASYNC_CLIENTS)


def is_sync_client(client: object) -> bool:
    return isinstance(client, _SYNC_CLIENTS)


def is_cluster_client(client: object) -> bool:
    return isinstance(client, _CLUSTER_CLIENTS)


def current_library() -> str:
    """The running async library: ``"asyncio"`` or ``"trio"``."""
    try:
        import sniffio
    except ImportError:  # trio depends on sniffio: without it only asyncio can be running
        return "asyncio"
    return sniffio.current_async_library()


# The queue's own retry policy and circuit breaker handle failures; redis-py retrying
# underneath would multiply the waits and hide outages from the breaker.
def _no_retry() -> redis.retry.Retry:
    return redis.retry.Retry(NoBackoff(), 0)


def _no_async_retry() -> redis.asyncio.retry.Retry:
    return redis.asyncio.retry.Retry(NoBackoff(), 0)


class ClientSettings:
    """How to build clients the backend owns (from the ``url`` option)."""

    def __init__(
        self, *, url: str, username: str | None, password: str | None, cluster: bool
    ) -> None:
        self.url = url
        self.cluster = cluster
        self.kwargs: dict[str, Any] = {
            "decode_responses": True,
            # Text is stored exactly as Python holds it, unpaired surrogates included.
            "encoding_errors": "surrogatepass",
            "socket_connect_timeout": CONNECT_TIMEOUT,
        }
        if not url.lower().startswith("unix:"):
            self.kwargs["socket_keepalive"] = True
            self.kwargs["socket_keepalive_options"] = _TCP_OPTIONS
        if username is not None:
            self.kwargs["username"] = username
        if password is not None:
            self.kwargs["password"] = password

    def asyncio_client(self) -> Any:
        kwargs = {**self.kwargs, "socket_timeout": None, "retry": _no_async_retry()}
        if self.cluster:
            return redis.asyncio.cluster.RedisCluster.from_url(
                self.url, max_connections=2 * POOL_SIZE, **kwargs
            )
        # A plain pool: the transport bounds concurrent commands itself (a blocking pool
        # costs a timer per command).
        pool = redis.asyncio.ConnectionPool.from_url(self.url, **kwargs)
        return redis.asyncio.Redis(connection_pool=pool, retry=_no_async_retry())

    def sync_client(self) -> Any:
        kwargs = {**self.kwargs, "socket_timeout": SOCKET_TIMEOUT, "retry": _no_retry()}
        if self.cluster:
            return redis.cluster.RedisCluster.from_url(
                self.url, max_connections=POOL_SIZE, **kwargs
            )
        # At most POOL_SIZE worker threads use it at once (the transport's limiter).
        pool = redis.ConnectionPool.from_url(self.url, max_connections=POOL_SIZE, **kwargs)
        return redis.Redis(connection_pool=pool, retry=_no_retry())


def _blpop_timeout(seconds: float) -> str | None:
    """BLPOP's timeout argument, in whole milliseconds (a zero timeout blocks for ever, so a
    wait shorter than a millisecond is not sent at all)."""
    millis = min(int(seconds * 1000), int(MAX_BLOCK * 1000))
    if millis < 1:
        return None
    return f"{millis / 1000:.3f}"


async def _run_unblockable(
    pop: Callable[[], Awaitable[T]],
    unblock: Callable[[], Awaitable[object]],
    abandoned: Callable[[T], Awaitable[None]] | None = None,
) -> T:
    """Run ``pop`` (a blocking pop) in a task of its own, shielded from cancellation, and wait
    for it as :func:`_unblockable_reply` does (for a pop whose reading cannot be cancelled
    half-way and resumed: redis-py's, in a worker thread or not)."""
    finished = anyio.Event()
    outcome: list[T] = []
    failure: list[Exception] = []

    async def run_pop() -> None:
        try:
            with anyio.CancelScope(shield=True):
                outcome.append(await pop())
        except Exception as exc:
            failure.append(exc)
        finally:
            finished.set()

    async def reply() -> T:
        await finished.wait()
        if failure:
            raise failure[0]
        return outcome[0]

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_pop)
        result = await _unblockable_reply(reply, finished.is_set, unblock, abandoned)
    return result


async def _unblockable_reply(
    reply: Callable[[], Awaitable[T]],
    done: Callable[[], bool],
    unblock: Callable[[], Awaitable[object]],
    abandoned: Callable[[T], Awaitable[None]] | None = None,
) -> T:
    """The reply of a blocking pop already sent: ``reply()`` awaits it, and cancelling that
    await leaves it coming; ``done()`` says whether it came.  When the caller is cancelled, end
    the pop early through ``unblock`` (CLIENT UNBLOCK from another connection), wait for it,
    hand what it returned to ``abandoned`` (the caller will never see it), and let the
    cancellation go on.  The pop's connection is never abandoned mid-reply.

    A cancellation that reaches the caller in the same step of the event loop as the reply
    (the task was already woken to read it) is honoured the same way: the reply goes to
    ``abandoned`` rather than into a cancelled task, where what it leased would wait out its
    lease."""
    try:
        outcome = await reply()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(_UNBLOCK_DEADLINE):
            while not done():
                try:
                    await unblock()
                except Exception:
                    break  # the pop then ends at its own timeout
                with anyio.move_on_after(_UNBLOCK_PAUSE):
                    with contextlib.suppress(Exception):  # the caller's close sees it
                        await reply()
            if done():
                await _hand_back(abandoned, reply)
        raise
    # Woken by the reply and cancelled in the same step: the cancellation is seen here.
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _hand_back(abandoned, lambda: _ready(outcome))
        raise
    return outcome


async def _ready(value: T) -> T:
    return value


async def _hand_back(
    abandoned: Callable[[T], Awaitable[None]] | None, reply: Callable[[], Awaitable[T]]
) -> None:
    """Give what a cancelled wait took (``reply()``, which has come) to ``abandoned``."""
    if abandoned is None:
        return
    try:
        await abandoned(await reply())
    except Exception as exc:
        log.warning("could not hand back what a cancelled wait took: %r", exc)


class _Lendable(Protocol):
    clean: bool


@contextlib.asynccontextmanager
async def _lent(
    waiter: _Lendable,
    check_in: Callable[[], None],
    close: Callable[[], Awaitable[object]],
) -> AsyncIterator[None]:
    """Lend a pooled wait connection for one exchange: after it, the connection goes back to its
    pool (``check_in``) when the exchange succeeded or left it clean (every reply read), and is
    otherwise closed, shielded from cancellation (a reply may still be on its way)."""
    healthy = False
    try:
        yield
        healthy = True
    finally:
        if healthy or waiter.clean:
            check_in()
        else:
            with anyio.CancelScope(shield=True):
                await close()


#: The longest a listener blocks in one read, in real seconds: a wait on the queue's clock
#: reads in slices this long, so a virtual clock's deadline is noticed and a worker thread is
#: never held long after a cancel.
LISTEN_SLICE: Final = 0.25


class Listener(abc.ABC):
    """One pub/sub subscription on a connection of its own (``Transport.listen``)."""

    @abc.abstractmethod
    async def get(self, timeout: float) -> tuple[str, str] | None:
        """The next message published on its channels, as ``(channel, data)``, or ``None``
        after ``timeout`` seconds (at most :data:`LISTEN_SLICE`)."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def _message_text(message: Any) -> tuple[str, str] | None:
    if message is None or message.get("type") not in ("message", "smessage"):
        return None
    return _text(message["channel"]), _text(message["data"])


def _confirmed(message: Any) -> bool:
    return message is not None and message.get("type") in ("subscribe", "ssubscribe")


class _AsyncListener(Listener):
    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub

    async def get(self, timeout: float) -> tuple[str, str] | None:
        message = await self._pubsub.get_message(
            ignore_subscribe_messages=True, timeout=min(max(timeout, 0.0), LISTEN_SLICE)
        )
        return _message_text(message)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._pubsub.aclose()


class _ThreadListener(Listener):
    def __init__(self, pubsub: Any, limiter: anyio.CapacityLimiter) -> None:
        self._pubsub = pubsub
        self._limiter = limiter

    async def get(self, timeout: float) -> tuple[str, str] | None:
        read = functools.partial(
            self._pubsub.get_message,
            ignore_subscribe_messages=True,
            timeout=min(max(timeout, 0.0), LISTEN_SLICE),
        )
        return _message_text(await anyio.to_thread.run_sync(read, limiter=self._limiter))

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._pubsub.close, limiter=self._limiter)


class Transport(abc.ABC):
    """What the backend needs from a Redis client."""

    def __init__(self, client: Any, *, owned: bool) -> None:
        self.client = client
        self.owned = owned
        self.cluster = is_cluster_client(client)

    @abc.abstractmethod
    async def command(self, *args: Any) -> Any:
        """Run one command; its reply (parsed as redis-py parses it)."""

    @abc.abstractmethod
    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run ``script`` by SHA (loading it again if the server forgot it)."""

    @abc.abstractmethod
    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run several scripts in one pipeline (one round trip per server); replies in order."""

    @abc.abstractmethod
    async def load(self, scripts: Sequence[Script]) -> None:
        """``SCRIPT LOAD`` every script (on every primary of a cluster)."""

    @abc.abstractmethod
    async def listen(self, channels: Sequence[str]) -> Listener:
        """Subscribe to ``channels`` (``SUBSCRIBE`` confirmed when this returns)."""

    async def wait(self, key: str, timeout: float) -> bool:
        """BLPOP ``key`` for up to ``timeout`` seconds; True when a token came."""
        blpop_timeout = _blpop_timeout(timeout)
        if blpop_timeout is None:
            await anyio.lowlevel.checkpoint()
            return False
        (reply,) = await self._on_waiter(key, lambda: [("BLPOP", key, blpop_timeout)])
        if isinstance(reply, Exception):
            raise reply
        return reply is not None

    async def wait_stream(self, key: str, after: str, timeout: float) -> None:
        """``XREAD BLOCK`` on the stream ``key`` for up to ``timeout`` seconds: return once it
        holds an entry after the id ``after`` (at once if it does), or the time passed."""
        blpop_timeout = _blpop_timeout(timeout)
        if blpop_timeout is None:
            await anyio.lowlevel.checkpoint()
            return
        millis = str(int(float(blpop_timeout) * 1000))
        (reply,) = await self._on_waiter(
            key, lambda: [("XREAD", "COUNT", "1", "BLOCK", millis, "STREAMS", key, after)]
        )
        if isinstance(reply, Exception):
            raise reply

    async def wait_between(
        self,
        key: str,
        into: str,
        timeout: float,
        before: ScriptCall,
        after: Callable[[], ScriptCall],
        abandoned: Callable[[Any], Awaitable[None]],
    ) -> Any:
        """In one exchange on a waiting connection: ``before``, ``BLMOVE key into`` for up to
        ``timeout`` seconds, then the script ``after()`` makes as the exchange is sent (Redis
        runs it the moment the wait ends); that script's reply.  ``None`` when nothing was sent
        (a wait under a millisecond) or the server had forgotten the scripts (loaded again,
        ``into`` deleted).  When the caller is cancelled, the wait is ended early and the
        script's reply goes to ``abandoned``."""
        blpop_timeout = _blpop_timeout(timeout)
        if blpop_timeout is None:
            await anyio.lowlevel.checkpoint()
            return None
        calls: list[ScriptCall] = []

        def make() -> list[tuple[Any, ...]]:
            calls[:] = (before, after())
            return [
                _evalsha(*calls[0]),
                ("BLMOVE", key, into, "LEFT", "RIGHT", blpop_timeout),
                _evalsha(*calls[1]),
            ]

        async def hand_back(replies: list[Any]) -> None:
            reply = await self._between_reply(into, calls, replies)
            if reply is not None:
                await abandoned(reply)

        replies = await self._on_waiter(key, make, hand_back)
        return await self._between_reply(into, calls, replies)

    async def _between_reply(
        self, into: str, calls: Sequence[ScriptCall], replies: list[Any]
    ) -> Any:
        """The last of :meth:`wait_between`'s three replies, or ``None`` after loading the
        scripts a server forgot (a restart, ``SCRIPT FLUSH``)."""
        if any(isinstance(reply, NoScriptError) for reply in replies):
            await self.load([script for script, _keys, _args in calls])
            await self.command("DEL", into)  # a token the wait may have moved there
            return None
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies[2]

    @abc.abstractmethod
    async def _on_waiter(self, key: str, make: Commands, abandoned: Abandoned = None) -> list[Any]:
        """The commands ``make`` returns (called as they are sent; the last one blocks) on a
        dedicated connection for ``key``: their replies, an error reply as its exception.  When
        the caller is cancelled, the blocking command is ended early and the replies go to
        ``abandoned``."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close what the transport opened; never a client it was handed."""


def _evalsha(script: Script, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


def _eval(script: Script, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
    return ("EVAL", script.source, len(keys), *keys, *args)


# -- asyncio ---------------------------------------------------------------------------------
class _AsyncWaiter:
    """A dedicated connection for BLPOP (and the node it talks to, on a cluster)."""

    def __init__(self, connection: Any, node: Any, takeover: StreamTakeover | None) -> None:
        self.connection = connection
        self.node = node
        self.client_id: int | None = None
        self._takeover = takeover
        self.wire: Wire | None = None
        # Whether the last exchange ended with every reply read, even one its caller was
        # cancelled from (ended early by CLIENT UNBLOCK): the connection is then fit to wait
        # again (a new one costs a connect and a CLIENT ID, on every same-process wake-up).
        self.clean = False

    async def start(self) -> None:
        await self.connection.connect()
        await self.connection.send_command("CLIENT", "ID")
        self.client_id = int(await self.connection.read_response())
        # Replies read by the wire come without redis-py's reading machinery, and the reply
        # of a wait can be awaited again after a cancellation (see _unblockable_reply).
        # Without the takeover accelerator, redis-py reads them (_run_unblockable).
        if self._takeover is not None:
            with contextlib.suppress(redis.exceptions.ConnectionError):
                self.wire = Wire(self.connection, self._takeover)

    async def stale(self) -> bool:
        """Closed, or readable while no reply is due: the server closed it (a restart) while
        it sat idle."""
        if self.wire is not None:
            return self.wire.stale
        # redis-py's public check (named can_read from redis-py 8, can_read_destructive
        # before, and deprecated under that name since).
        check = getattr(self.connection, "can_read", None) or self.connection.can_read_destructive
        try:
            return bool(await check())
        except (OSError, redis.exceptions.RedisError):
            return True

    async def exchange_unblockable(
        self,
        make: Callable[[], Sequence[Sequence[Any]]],
        unblock: Callable[[], Awaitable[object]],
        abandoned: Callable[[list[Any]], Awaitable[None]] | None,
    ) -> list[Any]:
        """:meth:`exchange` on the wire, ended early through ``unblock`` when the caller is
        cancelled (see :func:`_unblockable_reply`)."""
        wire = self.wire
        assert wire is not None
        self.clean = False
        commands = make()
        future = wire.send(pack(commands), len(commands))
        try:
            replies = await _unblockable_reply(
                lambda: wire.receive(future), future.done, unblock, abandoned
            )
        finally:
            self.clean = future.done() and not future.cancelled() and future.exception() is None
        fatal = unusable(replies)
        if fatal is not None:
            self.clean = False
            raise fatal
        return replies

    async def exchange(self, make: Callable[[], Sequence[Sequence[Any]]]) -> list[Any]:
        """Send the commands ``make`` returns (called at the last moment: they may carry the
        time they are sent) in one write; their replies (an error reply as its exception)."""
        self.clean = False
        commands = make()
        packed = self.connection.pack_commands(commands)
        await self.connection.send_packed_command(packed, check_health=False)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await self.connection.read_response())
            except ResponseError as exc:
                replies.append(exc)
        self.clean = True
        return replies

    async def close(self) -> None:
        if self.wire is not None:
            self.wire.close()
        await self.connection.disconnect()


def _semaphore(size: int) -> anyio.Semaphore:
    try:
        # No checkpoint when a slot is free: this guards every command.
        return anyio.Semaphore(size, fast_acquire=True)
    except TypeError:  # anyio < 4.5
        return anyio.Semaphore(size)


class AsyncioTransport(Transport):
    """redis-py's asyncio client (single server or cluster), on asyncio."""

    def __init__(self, client: Any, *, owned: bool, reply_poll: float = 0.0) -> None:
        super().__init__(client, owned=owned)
        self._idle: dict[str, list[_AsyncWaiter]] = {}
        # Bounds the commands in flight (and so the connections the pool opens).
        self._slots = _semaphore(POOL_SIZE)
        # A cluster client routes each call to its node itself; it keeps its own pools.
        # Without the takeover accelerator (see _accelerators), scripts go through redis-py.
        self._held: HeldWires | None = None
        if not self.cluster:
            pool = client.connection_pool
            takeover = stream_takeover(pool.connection_class, pool.make_connection)
            if takeover is not None:
                self._held = HeldWires(pool, takeover, POOL_SIZE, reply_poll=reply_poll)

    async def command(self, *args: Any) -> Any:
        async with self._slots:
            return await self.client.execute_command(*args)

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return (await self.scripts([(script, keys, args)]))[0]

    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        if not calls:
            return []
        commands = [_evalsha(script, keys, args) for script, keys, args in calls]
        if self._held is not None:
            replies = await self._held.exchange(commands)
        elif len(commands) == 1:
            # A cluster client routes a lone command itself; a pipeline of one costs more.
            async with self._slots:
                try:
                    replies = [await self.client.execute_command(*commands[0])]
                except NoScriptError as exc:
                    replies = [exc]
        else:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            async with self._slots:
                replies = list(await pipe.execute(raise_on_error=False))
        for n, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                # EVAL loads the script again (a restart or SCRIPT FLUSH forgot it).
                reply = replies[n] = await self._run(_eval(*calls[n]))
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def _run(self, command: Sequence[Any]) -> Any:
        if self._held is not None:
            reply = (await self._held.exchange([command]))[0]
            if isinstance(reply, Exception):
                raise reply
            return reply
        async with self._slots:
            return await self.client.execute_command(*command)

    async def load(self, scripts: Sequence[Script]) -> None:
        for script in scripts:
            await self.client.script_load(script.source)

    async def listen(self, channels: Sequence[str]) -> Listener:
        pubsub = self.client.pubsub()
        try:
            await pubsub.subscribe(*channels)
            # Until the server confirms, a message published meanwhile could be missed.
            with anyio.fail_after(CONNECT_TIMEOUT):
                for _ in channels:
                    while not _confirmed(await pubsub.get_message(timeout=LISTEN_SLICE)):
                        pass
        except BaseException:
            with anyio.CancelScope(shield=True):
                await pubsub.aclose()
            raise
        return _AsyncListener(pubsub)

    def _waiter_source(self, key: str) -> tuple[str, Any, type, Callable[[], Any]]:
        """(pool name, node, connection class, factory of a new dedicated connection) for
        waits on ``key``."""
        if self.cluster:
            node = self.client.get_node_from_key(key)
            # The node's kwargs name its host and port too (redis-py >= 6).
            kwargs = {
                **node.connection_kwargs,
                "host": node.host,
                "port": node.port,
                "socket_timeout": MAX_BLOCK + SOCKET_TIMEOUT,
            }
            factory = functools.partial(node.connection_class, **kwargs)
            return node.name, node, node.connection_class, factory
        pool = self.client.connection_pool
        kwargs = {**pool.connection_kwargs, "socket_timeout": MAX_BLOCK + SOCKET_TIMEOUT}
        return "", None, pool.connection_class, functools.partial(pool.connection_class, **kwargs)

    async def _on_waiter(self, key: str, make: Commands, abandoned: Abandoned = None) -> list[Any]:
        if self.cluster:
            await self.client.initialize()
        name, node, connection_class, factory = self._waiter_source(key)
        idle = self._idle.setdefault(name, [])
        while idle and await idle[-1].stale():
            # The server closed it while it sat idle (a restart): connect afresh.
            await idle.pop().close()
        if idle:
            waiter = idle.pop()
        else:
            takeover = stream_takeover(connection_class, factory)
            waiter = _AsyncWaiter(factory(), node, takeover)
            try:
                await waiter.start()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await waiter.close()
                raise
        async with _lent(waiter, functools.partial(idle.append, waiter), waiter.close):
            if waiter.wire is not None:
                return await waiter.exchange_unblockable(
                    make, lambda: self._unblock(waiter), abandoned
                )
            return await _run_unblockable(
                lambda: waiter.exchange(make), lambda: self._unblock(waiter), abandoned
            )

    async def _unblock(self, waiter: _AsyncWaiter) -> object:
        if waiter.node is not None:
            return await self.client.execute_command(
                "CLIENT UNBLOCK", waiter.client_id, target_nodes=waiter.node
            )
        return await self.client.execute_command("CLIENT", "UNBLOCK", waiter.client_id)

    async def aclose(self) -> None:
        waiters = [waiter for idle in self._idle.values() for waiter in idle]
        self._idle.clear()
        for waiter in waiters:
            await waiter.close()
        if self._held is not None:
            self._held.close()
        if self.owned:
            close = getattr(self.client, "aclose", None) or self.client.close  # redis < 5.0.1
            await close()
            pool = getattr(self.client, "connection_pool", None)
            if pool is not None:
                await pool.disconnect()


# -- threads (trio) --------------------------------------------------------------------------
class _SyncWaiter:
    def __init__(self, connection: Any, node: Any) -> None:
        self.connection = connection
        self.node = node
        self.client_id: int | None = None
        self.clean = False  # as _AsyncWaiter.clean

    def start(self) -> None:
        self.connection.connect()
        self.connection.send_command("CLIENT", "ID")
        self.client_id = int(self.connection.read_response())

    def exchange(self, make: Callable[[], Sequence[Sequence[Any]]]) -> list[Any]:
        """Send the commands ``make`` returns (called at the last moment: they may carry the
        time they are sent) in one write; their replies (an error reply as its exception)."""
        self.clean = False
        commands = make()
        self.connection.send_packed_command(self.connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(self.connection.read_response())
            except ResponseError as exc:
                replies.append(exc)
        self.clean = True
        return replies

    @property
    def stale(self) -> bool:
        """Readable while no reply is due: the server closed it (a restart) while it sat idle.
        (An idle waiter is always connected: ``can_read`` never connects here.)"""
        try:
            return bool(self.connection.can_read(timeout=0))
        except (OSError, ValueError, redis.exceptions.RedisError):  # closed under us
            return True

    def close(self) -> None:
        self.connection.disconnect()


class ThreadTransport(Transport):
    """redis-py's sync client (single server or cluster) in anyio worker threads."""

    def __init__(self, client: Any, *, owned: bool) -> None:
        super().__init__(client, owned=owned)
        self._limiter = anyio.CapacityLimiter(POOL_SIZE)
        self._wait_limiter = anyio.CapacityLimiter(WAIT_THREADS)
        self._idle: dict[str, list[_SyncWaiter]] = {}

    async def _run(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn, limiter=self._limiter)

    async def command(self, *args: Any) -> Any:
        return await self._run(functools.partial(self.client.execute_command, *args))

    def _script_sync(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return self.client.execute_command(*_evalsha(script, keys, args))
        except NoScriptError:
            return self.client.execute_command(*_eval(script, keys, args))

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self._run(functools.partial(self._script_sync, script, keys, args))

    def _scripts_sync(self, calls: Sequence[ScriptCall]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.execute_command(*_evalsha(script, keys, args))
        replies = list(pipe.execute(raise_on_error=False))
        for n, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                replies[n] = self._script_sync(*calls[n])
            elif isinstance(reply, Exception):
                raise reply
        return replies

    async def scripts(self, calls: Sequence[ScriptCall]) -> list[Any]:
        if not calls:
            return []
        return await self._run(functools.partial(self._scripts_sync, calls))

    async def load(self, scripts: Sequence[Script]) -> None:
        def load_all() -> None:
            for script in scripts:
                self.client.script_load(script.source)

        await self._run(load_all)

    async def listen(self, channels: Sequence[str]) -> Listener:
        def subscribe() -> Any:
            pubsub = self.client.pubsub()
            try:
                pubsub.subscribe(*channels)
                confirmed = 0
                for _ in range(int(CONNECT_TIMEOUT / LISTEN_SLICE)):
                    confirmed += _confirmed(pubsub.get_message(timeout=LISTEN_SLICE))
                    if confirmed == len(channels):
                        break
                else:
                    raise TimeoutError(f"no confirmation of SUBSCRIBE {' '.join(channels)}")
            except BaseException:
                pubsub.close()
                raise
            return pubsub

        pubsub = await anyio.to_thread.run_sync(subscribe, limiter=self._wait_limiter)
        return _ThreadListener(pubsub, self._wait_limiter)

    async def _checkout(self, key: str) -> _SyncWaiter:
        """An idle dedicated connection for waits on ``key``, or a new one."""
        if self.cluster:
            node = self.client.get_node_from_key(key)
            pool = node.redis_connection.connection_pool
            name = node.name
        else:
            node, pool, name = None, self.client.connection_pool, ""
        idle = self._idle.setdefault(name, [])
        while idle:
            waiter = idle.pop()
            if not waiter.stale:
                return waiter
            await self._run(waiter.close)  # connect afresh below
        kwargs = {**pool.connection_kwargs, "socket_timeout": MAX_BLOCK + SOCKET_TIMEOUT}
        waiter = _SyncWaiter(pool.connection_class(**kwargs), node)
        try:
            await self._run(waiter.start)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._run(waiter.close)
            raise
        return waiter

    def _checkin(self, waiter: _SyncWaiter) -> None:
        name = "" if waiter.node is None else waiter.node.name
        self._idle.setdefault(name, []).append(waiter)

    async def _on_waiter(self, key: str, make: Commands, abandoned: Abandoned = None) -> list[Any]:
        waiter = await self._checkout(key)
        check_in = functools.partial(self._checkin, waiter)
        async with _lent(waiter, check_in, functools.partial(self._run, waiter.close)):
            return await _run_unblockable(
                lambda: anyio.to_thread.run_sync(
                    functools.partial(waiter.exchange, make), limiter=self._wait_limiter
                ),
                lambda: self._unblock(waiter),
                abandoned,
            )

    async def _unblock(self, waiter: _SyncWaiter) -> object:
        if waiter.node is not None:
            return await self._run(
                functools.partial(
                    self.client.execute_command,
                    "CLIENT UNBLOCK",
                    waiter.client_id,
                    target_nodes=waiter.node,
                )
            )
        return await self.command("CLIENT", "UNBLOCK", waiter.client_id)

    async def aclose(self) -> None:
        waiters = [waiter for idle in self._idle.values() for waiter in idle]
        self._idle.clear()
        client, owned = self.client, self.owned

        def close_all() -> None:
            for waiter in waiters:
                waiter.close()
            if owned:
                client.close()
                pool = getattr(client, "connection_pool", None)
                if pool is not None:
                    pool.disconnect()

        await self._run(close_all)
