"""The redis backend's optional accelerators (see :mod:`blamequeue._accelerators`).

Both serve the asyncio transport's script calls, and both lean on names neither redis-py nor
asyncio promises to keep, so each is probed at first use (a backend's ``open()``, never at
``import blamequeue_redis``), and a probe that finds anything off leaves the portable path:

* :func:`stream_takeover`: take over the asyncio stream of a connection redis-py opened
  (:class:`~blamequeue_redis._wire.Wire` then writes requests and parses replies itself).
  Portable path: scripts go through redis-py's public client (``execute_command``, pipelines),
  blocking waits through its connection's ``send_packed_command`` / ``read_response``.
* :func:`loop_idle`: whether the asyncio loop has nothing else ready to run, so that a reply
  due within microseconds may be polled for on the socket.  Portable path: never poll (there
  is no public way to ask an asyncio loop this); the reply is read when the loop wakes.

``BLAMEQUEUE_PORTABLE=1`` turns both off.  The asyncio module is imported here on purpose:
these serve the asyncio transport only.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - these serve the asyncio transport only
import collections
from collections.abc import Callable
from typing import Any

import redis.exceptions

from blamequeue._accelerators import Unfit, accelerator

__all__ = ["StreamTakeover", "loop_idle", "stream_takeover"]


class StreamTakeover:
    """How to take the asyncio transport of a connection redis-py opened, and to give the
    connection back to redis-py as closed.  Reaches ``connection._reader`` / ``._writer`` and
    the reader's ``_buffer`` (checked empty: no reply is half-read)."""

    def take(self, connection: Any) -> asyncio.Transport:
        """The connection's transport, whose protocol the caller replaces; a redis-py
        ``ConnectionError`` when the connection is not in a state to hand over."""
        reader, writer = getattr(connection, "_reader", None), getattr(connection, "_writer", None)
        if not isinstance(reader, asyncio.StreamReader) or not isinstance(
            writer, asyncio.StreamWriter
        ):
            raise redis.exceptions.ConnectionError("the connection is not ready to take over")
        buffered = getattr(reader, "_buffer", None)
        if not isinstance(buffered, bytearray) or buffered:
            raise redis.exceptions.ConnectionError("the connection has unread bytes")
        transport: asyncio.Transport = writer.transport  # type: ignore[assignment]
        return transport

    def release(self, connection: Any) -> None:
        """redis-py sees the connection as closed (its transport was aborted by the taker)."""
        connection._reader = connection._writer = None


def _key_of_connections(connection_class: type, make: Callable[[], Any]) -> type:
    return connection_class


@accelerator("connection takeover (redis-py connection._reader/_writer)", key=_key_of_connections)
def stream_takeover(connection_class: type, make: Callable[[], Any]) -> StreamTakeover:
    """A :class:`StreamTakeover` when ``connection_class`` (``make()`` builds one, not
    connected: a pool's ``make_connection``) is as it knows redis-py's asyncio connections:
    stream reader and writer that are None until ``connect``, and an encoder saying how replies
    are decoded.  Else, say with a future redis-py, ``None``: scripts go through redis-py."""
    connection = make()  # not connected: nothing to close
    if not isinstance(connection, connection_class):
        raise Unfit(f"make() built a {type(connection).__name__}, not a {connection_class}")
    for name in ("_reader", "_writer"):
        if not hasattr(connection, name) or getattr(connection, name) is not None:
            raise Unfit(f"a new connection has no {name} that is None before connect")
    if not callable(getattr(connection, "connect", None)):
        raise Unfit("a connection has no connect()")
    encoder = getattr(connection, "encoder", None)
    for name in ("decode_responses", "encoding", "encoding_errors"):
        if not hasattr(encoder, name):
            raise Unfit(f"a connection's encoder has no {name}")
    return StreamTakeover()


def _key_of_loop(loop: asyncio.AbstractEventLoop) -> type:
    return type(loop)


@accelerator("reply polling (asyncio loop._ready)", key=_key_of_loop)
def loop_idle(loop: asyncio.AbstractEventLoop) -> Callable[[asyncio.AbstractEventLoop], bool]:
    """For loops of ``loop``'s type: whether a loop has no callback due now (its ``_ready``
    queue is empty).  Self-test on ``loop`` (running): a callback it is given with
    ``call_soon`` is in that queue until it runs."""
    ready = getattr(loop, "_ready", None)
    if not isinstance(ready, collections.deque):
        raise Unfit(f"{type(loop).__name__} keeps no _ready deque")
    handle = loop.call_soon(lambda: None)
    handle.cancel()
    if handle not in ready:
        raise Unfit("a callback given with call_soon is not in _ready")
    ready.remove(handle)  # else the first reply after the probe would not be polled for

    def idle(loop: asyncio.AbstractEventLoop) -> bool:
        return not loop._ready  # type: ignore[attr-defined]

    return idle
