"""Mapping redis-py exceptions to :class:`~blamequeue.errors.QueueError`, at the boundary.

* The server is unreachable, restarting, loading its data, failing over, out of memory, or a
  cluster slot is moving: temporary, so :class:`BackendUnavailableError` (retryable, counted by
  the circuit breaker).
* Wrong password or user, a user missing an ACL permission: a person must fix the
  configuration, so ``queue/invalid-config`` (not retried) with a message saying what to check.
* Anything else Redis answers with an error is not retried either.

A credential never leaves this boundary: every text taken from redis-py is scrubbed of the
backend's secrets (:attr:`~blamequeue_redis._options.RedisOptions.secrets`) before it goes into a
message, and so is the foreign exception itself (it stays the ``__cause__``, so a formatted
traceback shows it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from redis import exceptions as rx

from blamequeue.abc import ErrorMap, ErrorRule, redact_chain
from blamequeue.errors import QueueError
from blamequeue_redis._options import scrub

__all__ = ["DUPLICATE_JOB", "map_redis_error"]

#: The prefix of the error the enqueue script raises for an id that already exists.
DUPLICATE_JOB: Final = "BQDUP"


def _types(*names: str) -> tuple[type[BaseException], ...]:
    # Some classes exist only in newer redis-py releases.
    return tuple(cls for name in names if isinstance(cls := getattr(rx, name, None), type))


_AUTH = _types("AuthenticationError", "AuthenticationWrongNumberOfArgsError", "AuthorizationError")
_PERMISSION = _types("NoPermissionError")
_TEMPORARY = _types(
    "ConnectionError",
    "TimeoutError",
    "BusyLoadingError",
    "ClusterDownError",
    "ClusterError",
    "TryAgainError",
    "MasterDownError",
    "ReadOnlyError",
    "OutOfMemoryError",
    "SlotNotCoveredError",
    "RedisClusterException",
)
# Error replies that are temporary although redis-py raises a plain ResponseError for them.
_TEMPORARY_REPLIES: Final = ("OOM ", "LOADING", "BUSY ", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")


def _replying(*prefixes: str) -> Callable[[BaseException], bool]:
    """A test for errors whose text starts with one of ``prefixes`` (Redis error replies)."""
    return lambda exc: str(exc).startswith(prefixes)


def _either(
    types: tuple[type[BaseException], ...], reply: Callable[[BaseException], bool]
) -> Callable[[BaseException], bool]:
    return lambda exc: isinstance(exc, types) or reply(exc)


_ERRORS: Final = ErrorMap(
    ErrorRule(
        when=_either(_AUTH, _replying("WRONGPASS", "NOAUTH")),
        code="queue/invalid-config",
        message="{where}: Redis refused the credentials ({text}); check the 'username' and "
        "'password' options (or the user:password in the URL) and the server's ACL users",
    ),
    ErrorRule(
        when=_either(_PERMISSION, _replying("NOPERM")),
        code="queue/invalid-config",
        message="{where}: the Redis user lacks a permission blamequeue needs ({text}); grant it "
        "the key pattern of the key_prefix and the commands EVALSHA, EVAL, SCRIPT, BLPOP, "
        "SMEMBERS, SADD, ZCARD, INFO and CLIENT (e.g. ACL SETUSER <user> ~blamequeue:* +@all)",
    ),
    ErrorRule(
        when=lambda exc: isinstance(exc, rx.ResponseError) and _replying(DUPLICATE_JOB)(exc),
        code="queue/bad-argument",
        message="{where}: {detail}",
    ),
    ErrorRule(
        when=_either(_TEMPORARY, _replying(*_TEMPORARY_REPLIES)),
        retryable=True,
        message="{where}: Redis is unavailable ({kind}: {text}); the call will be retried",
    ),
    ErrorRule(when=OSError, retryable=True, message="{where}: connection to Redis failed: {text}"),
    ErrorRule(
        when=UnicodeError,
        code="queue/bad-payload",
        message="{where}: text that is not valid Unicode cannot be sent: {text}",
    ),
    otherwise=ErrorRule(
        when=Exception, message="{where}: Redis answered with an error ({kind}: {text})"
    ),
)


def map_redis_error(exc: BaseException, *, where: str, secrets: Sequence[str] = ()) -> QueueError:
    """The :class:`QueueError` to raise (``from exc``) for ``exc``; ``where`` names the backend
    (without credentials) and ``secrets`` are the credentials to keep out of every text."""
    if isinstance(exc, QueueError):
        return exc
    hidden = tuple(secrets)
    if hidden:
        redact_chain(exc, lambda text: scrub(text, hidden))
    text = scrub(str(exc), hidden)
    detail = text[len(DUPLICATE_JOB) :].strip()
    return _ERRORS.map(exc, where=where, text=text, detail=detail)
