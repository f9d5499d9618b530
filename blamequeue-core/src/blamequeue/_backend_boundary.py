"""Base kit: the store boundary of a backend.

:class:`StoreGuard` holds what :meth:`~blamequeue.abc.Backend.open` opened and refuses use
before it and after :meth:`~blamequeue.abc.Backend.close`; :class:`ErrorMap` (rows of
:class:`ErrorRule`) maps the store's foreign exceptions to
:class:`~blamequeue.errors.QueueError` errors; :func:`redact_chain` keeps credentials out of the
foreign exceptions kept as causes.  Import them from :mod:`blamequeue.abc`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from .errors import BackendUnavailableError, BadArgumentError, ConfigError, QueueError

if TYPE_CHECKING:
    from .errors import ErrorCode

__all__ = ["ErrorMap", "ErrorRule", "StoreGuard", "redact_chain"]

H = TypeVar("H")
T = TypeVar("T")


# -- the store boundary ---------------------------------------------------------------------
@attrs.define(eq=False)
class StoreGuard(Generic[H]):
    """The handle a backend opened (a connection, a client, a transport), and the two checks
    made on every use of it.

    ``open()`` stores the handle with :meth:`opened`, ``close()`` takes it back with
    :meth:`closed`; each method reaches it through :meth:`require`, which refuses with
    ``queue/not-initialized`` (the same error before open and after close) naming
    :attr:`where`.  :meth:`call` awaits a call on the store and maps any foreign exception
    with :attr:`map_error`, chained (``raise ... from exc``); a ``QueueError`` passes as it is::

        self._guard = StoreGuard[Client](where=f"mystore backend {context.name!r}",
                                          map_error=my_error_map.bind(where))

        async def size(self, queue):
            client = self._guard.require()
            return await self._guard.call(client.count(queue))
    """

    where: str
    """How messages name the backend and its store (no credentials)."""
    map_error: Callable[[Exception], QueueError] | None = None
    """Maps a foreign exception to the error to raise; ``None``: :meth:`call` maps every
    foreign exception to a non-retryable ``queue/backend-unavailable``."""
    handle: H | None = attrs.field(default=None, init=False)
    """The open handle, ``None`` while closed."""

    @property
    def is_open(self) -> bool:
        return self.handle is not None

    def opened(self, handle: H) -> H:
        """Keep ``handle`` as the open store; returns it."""
        self.handle = handle
        return handle

    def closed(self) -> H | None:
        """Forget the handle (the backend is closed from now on) and return it, to release."""
        handle, self.handle = self.handle, None
        return handle

    def require(self) -> H:
        """The open handle; ``queue/not-initialized`` when the backend is not open."""
        handle = self.handle
        if handle is None:
            raise QueueError(
                "queue/not-initialized",
                f"{self.where} is not open: use 'async with queue:' or await queue.start() "
                f"before calling it",
            )
        return handle

    def mapped(self, exc: Exception) -> QueueError:
        """The error to raise (``from exc``) for ``exc`` met at this boundary."""
        if isinstance(exc, QueueError):
            return exc
        if self.map_error is not None:
            return self.map_error(exc)
        return BackendUnavailableError(
            f"{self.where}: the store raised {type(exc).__name__}: {exc}", retryable=False
        )

    async def call(self, call: Awaitable[T]) -> T:
        """``await call``, mapping a foreign exception it raises (see :meth:`mapped`)."""
        try:
            return await call
        except QueueError:
            raise
        except Exception as exc:
            raise self.mapped(exc) from exc


# -- foreign errors -----------------------------------------------------------------------
_ERRORS: dict[str, Callable[[ErrorCode, str], QueueError]] = {
    "queue/invalid-config": ConfigError,
    "queue/bad-argument": BadArgumentError,
    "queue/bad-payload": BadArgumentError,
}


@attrs.frozen(kw_only=True)
class ErrorRule:
    """One row of an :class:`ErrorMap`: which foreign errors it takes and what they become.

    ``when`` is an exception class (or a tuple of them) or a test of the exception.
    ``message`` is a :meth:`str.format` template for people, saying what happened and what
    to do; it may use ``{where}`` (the backend), ``{text}`` (the error's text), ``{kind}``
    (its class name) and any field passed to :meth:`ErrorMap.map`.  A temporary failure
    (connection lost, busy, throttled) is ``queue/backend-unavailable`` with ``retryable``
    (the core retries it and counts it towards the circuit breaker); anything a person must
    fix is not retryable and takes the code that says what is wrong (``queue/invalid-config``,
    ``queue/bad-argument``, ``queue/bad-payload``, or ``queue/backend-unavailable``).
    """

    when: type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
    message: str
    code: ErrorCode = "queue/backend-unavailable"
    retryable: bool = False

    def matches(self, exc: BaseException) -> bool:
        when = self.when
        if isinstance(when, type | tuple):
            return isinstance(exc, when)
        return when(exc)

    def error(self, fields: Mapping[str, Any]) -> QueueError:
        message = self.message.format_map(fields)
        if self.code == "queue/backend-unavailable":
            return BackendUnavailableError(message, retryable=self.retryable)
        make = _ERRORS.get(self.code)
        if make is not None:
            error = make(self.code, message)
            error.retryable = self.retryable
            return error
        return QueueError(self.code, message, retryable=self.retryable)


class ErrorMap:
    """A backend's foreign errors, mapped at its boundary: the first :class:`ErrorRule`
    that matches decides, ``otherwise`` takes the rest.

    ``text`` reads an exception's text (``str`` by default); ``redact`` cleans it of
    credentials, and is also applied to the exception itself and its chain
    (:func:`redact_chain`), since it stays the ``__cause__`` of the error raised::

        errors = ErrorMap(
            ErrorRule(when=TimeoutError, retryable=True,
                      message="{where}: the store timed out ({text}); the call will be retried"),
            otherwise=ErrorRule(when=Exception,
                                message="{where}: the store failed ({kind}: {text})"),
        )
        raise errors.map(exc, where="mystore backend 'main'") from exc
    """

    def __init__(
        self,
        *rules: ErrorRule,
        otherwise: ErrorRule,
        text: Callable[[BaseException], str] = str,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.rules = (*rules, otherwise)
        self.text = text
        self.redact = redact

    def map(self, exc: BaseException, *, where: str, **fields: Any) -> QueueError:
        """The error to raise (``from exc``) for ``exc``; a ``QueueError`` is returned as it
        is.  ``fields`` fill the rules' message templates beside where, text and kind."""
        if isinstance(exc, QueueError):
            return exc
        text = self.text(exc)
        if self.redact is not None:
            redact_chain(exc, self.redact)
            text = self.redact(text)
        values = {"where": where, "text": text, "kind": type(exc).__name__, **fields}
        for rule in self.rules[:-1]:
            if rule.matches(exc):
                return rule.error(values)
        return self.rules[-1].error(values)

    def bind(self, where: str, **fields: Any) -> Callable[[Exception], QueueError]:
        """:meth:`map` with ``where`` (and ``fields``) set: a :attr:`StoreGuard.map_error`."""
        return lambda exc: self.map(exc, where=where, **fields)


def redact_chain(exc: BaseException, redact: Callable[[str], str]) -> None:
    """Pass every text argument of ``exc`` and of the exceptions it came from (its
    ``__cause__`` / ``__context__`` chain) through ``redact``, so neither its text nor a
    formatted traceback shows a credential it held."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in current.args)
        if args != current.args:
            current.args = args
        current = current.__cause__ or current.__context__
