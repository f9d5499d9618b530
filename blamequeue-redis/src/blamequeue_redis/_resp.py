"""RESP, the Redis protocol, as the backend's own connections speak it: requests packed in one
buffer (:func:`pack`), replies parsed as they arrive (:func:`parse_reply`, RESP2 and RESP3),
error replies typed as redis-py types them (:func:`parse_error`).  No I/O here: the asyncio
transport's wires (:mod:`blamequeue_redis._wire`) and the stream transport of trio
(:mod:`blamequeue_redis._streams`) both read and write through it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions
from redis.exceptions import ResponseError

__all__ = [
    "ERROR_CLASSES",
    "Decode",
    "Incomplete",
    "pack",
    "parse_error",
    "parse_reply",
    "unusable",
]

Decode = Callable[[bytes], Any] | None


def _error_class(name: str, default: type[Exception] = ResponseError) -> type[Exception]:
    found = getattr(redis.exceptions, name, None)  # some are newer than the oldest redis-py
    return found if isinstance(found, type) and issubclass(found, Exception) else default


# The error replies a script call can meet, typed as redis-py types them (its parsers'
# table is private): the code is dropped from the message of a known one.
ERROR_CLASSES: dict[str, type[Exception]] = {
    code: _error_class(name)
    for code, name in (
        ("NOSCRIPT", "NoScriptError"),
        ("OOM", "OutOfMemoryError"),
        ("WRONGPASS", "AuthenticationError"),
        ("NOAUTH", "AuthenticationError"),
        ("NOPERM", "NoPermissionError"),
        ("EXECABORT", "ExecAbortError"),
        ("LOADING", "BusyLoadingError"),
        ("READONLY", "ReadOnlyError"),
        ("TRYAGAIN", "TryAgainError"),
        ("CLUSTERDOWN", "ClusterDownError"),
        ("CROSSSLOT", "ClusterCrossSlotError"),
        ("MASTERDOWN", "MasterDownError"),
    )
}
_ERR_CLASSES: dict[str, type[Exception]] = {
    "max number of clients reached": _error_class(
        "MaxClientsReachedError", redis.exceptions.ConnectionError
    ),
    "invalid password": redis.exceptions.AuthenticationError,
}


def parse_error(text: str) -> Exception:
    """The redis-py exception for an error reply's ``text`` (``NOSCRIPT No matching script.``
    -> ``NoScriptError("No matching script.")``; an unknown code: ``ResponseError(text)``)."""
    code, _, rest = text.partition(" ")
    if code == "ERR":
        return _ERR_CLASSES.get(rest, ResponseError)(rest)
    found = ERROR_CLASSES.get(code)
    if found is None:
        return ResponseError(text)
    return found(rest)


def pack(commands: Sequence[Sequence[Any]]) -> bytes:
    """``commands`` in RESP, as one buffer.  The scripts' arguments are only text and numbers,
    so this skips the general encoder of redis-py (a fifth of a single enqueue's CPU)."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, str):
                data = arg.encode("utf-8", "surrogatepass")
            elif isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
                data = repr(arg).encode("ascii")
            else:
                raise TypeError(f"a script argument must be text or a number, not {arg!r}")
            out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


class Incomplete(Exception):
    """The buffer ends before the reply does: wait for more bytes."""


def _length_prefixed(buf: bytes, end: int, size: int) -> tuple[bytes, int]:
    stop = end + 2 + size
    if len(buf) < stop + 2:
        raise Incomplete
    return buf[end + 2 : stop], stop + 2


def parse_reply(buf: bytes, pos: int, decode: Decode) -> tuple[Any, int]:
    """One reply starting at ``pos``: ``(value, position after it)``, typed as redis-py's own
    parsers type it (RESP2, and RESP3, redis-py's default).  An error reply is returned as
    redis-py's exception for it (``NoScriptError`` for ``NOSCRIPT`` ...)."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    kind = buf[pos]
    line = buf[pos + 1 : end]
    if kind == 36:  # $ bulk string
        size = int(line)
        if size < 0:
            return None, end + 2
        data, after = _length_prefixed(buf, end, size)
        return (decode(data) if decode else data), after
    if kind == 58 or kind == 40:  # : integer, ( big number
        return int(line), end + 2
    if kind == 42 or kind == 126 or kind == 62 or kind == 37 or kind == 124:
        # * array, ~ set (a list, as redis-py gives it), > push, % map, | attribute
        count = int(line)
        if count < 0:
            return None, end + 2
        if kind == 37 or kind == 124:
            count *= 2
        pos = end + 2
        items = []
        for _ in range(count):
            item, pos = parse_reply(buf, pos, decode)
            items.append(item)
        if kind == 62 or kind == 124:
            # Out-of-band data (a push, attributes of the reply that follows): not a reply.
            return parse_reply(buf, pos, decode)
        if kind == 37:
            return dict(zip(items[::2], items[1::2], strict=True)), pos
        return items, pos
    if kind == 95:  # _ null
        return None, end + 2
    if kind == 43:  # + simple string
        return (decode(line) if decode else line), end + 2
    if kind == 35:  # # boolean
        return line == b"t", end + 2
    if kind == 44:  # , double
        return float(line), end + 2
    if kind == 61:  # = verbatim string: "txt:" then the text
        data, after = _length_prefixed(buf, end, int(line))
        return (decode(data[4:]) if decode else data[4:]), after
    if kind == 45:  # - error
        return parse_error(line.decode("utf-8", "replace")), end + 2
    if kind == 33:  # ! blob error
        data, after = _length_prefixed(buf, end, int(line))
        return parse_error(data.decode("utf-8", "replace")), after
    raise redis.exceptions.InvalidResponse(f"unexpected reply type byte {chr(kind)!r}")


def unusable(replies: Sequence[Any]) -> Exception | None:
    """The first reply that leaves its connection unusable: an error other than a command's
    own (an authentication error...); None when every reply is fit."""
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, ResponseError):
            return reply
    return None
