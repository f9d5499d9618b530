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

from collections.abc import Sequence
from typing import Final

from redis import exceptions as rx

from blamequeue.errors import BackendUnavailableError, BadArgumentError, ConfigError, QueueError
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


def _scrub_chain(exc: BaseException, secrets: tuple[str, ...]) -> None:
    """Replace ``secrets`` in the arguments of ``exc`` and of the exceptions it came from, so
    that neither its text nor a traceback that shows it holds a credential."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(
            isinstance(arg, str) and secret in arg for arg in current.args for secret in secrets
        ):
            current.args = tuple(
                scrub(arg, secrets) if isinstance(arg, str) else arg for arg in current.args
            )
        current = current.__cause__ or current.__context__


def map_redis_error(exc: BaseException, *, where: str, secrets: Sequence[str] = ()) -> QueueError:
    """The :class:`QueueError` to raise (``from exc``) for ``exc``; ``where`` names the backend
    (without credentials) and ``secrets`` are the credentials to keep out of every text."""
    if isinstance(exc, QueueError):
        return exc
    hidden = tuple(secrets)
    if hidden:
        _scrub_chain(exc, hidden)
    text = scrub(str(exc), hidden)
    if isinstance(exc, _AUTH) or text.startswith(("WRONGPASS", "NOAUTH")):
        return ConfigError(
            "queue/invalid-config",
            f"{where}: Redis refused the credentials ({text}); check the 'username' and "
            f"'password' options (or the user:password in the URL) and the server's ACL users",
        )
    if isinstance(exc, _PERMISSION) or text.startswith("NOPERM"):
        return ConfigError(
            "queue/invalid-config",
            f"{where}: the Redis user lacks a permission blamequeue needs ({text}); grant it "
            f"the key pattern of the key_prefix and the commands EVALSHA, EVAL, SCRIPT, "
            f"BLPOP, SMEMBERS, SADD, ZCARD, INFO and CLIENT (e.g. "
            f"ACL SETUSER <user> ~blamequeue:* +@all)",
        )
    if isinstance(exc, rx.ResponseError) and text.startswith(DUPLICATE_JOB):
        detail = text[len(DUPLICATE_JOB) :].strip()
        return BadArgumentError("queue/bad-argument", f"{where}: {detail}")
    if isinstance(exc, _TEMPORARY) or text.startswith(_TEMPORARY_REPLIES):
        return BackendUnavailableError(
            f"{where}: Redis is unavailable ({type(exc).__name__}: {text}); the call will be "
            f"retried"
        )
    if isinstance(exc, OSError):
        return BackendUnavailableError(f"{where}: connection to Redis failed: {text}")
    if isinstance(exc, UnicodeError):
        return BadArgumentError(
            "queue/bad-payload", f"{where}: text that is not valid Unicode cannot be sent: {text}"
        )
    return QueueError(
        "queue/backend-unavailable",
        f"{where}: Redis answered with an error ({type(exc).__name__}: {text})",
        retryable=False,
    )
