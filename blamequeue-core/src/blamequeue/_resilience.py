"""Retry policy and circuit breaker: every backend call goes through both.

Only retryable :class:`QueueError` s are retried, and only those count towards the breaker: a
bad argument is the caller's mistake, not a sign the backend is down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import attrs

from ._validation import MAX_SECONDS_TEXT, is_duration
from .abc import Clock
from .errors import BackendUnavailableError, ConfigError, QueueError

__all__ = ["CircuitBreaker", "Guard", "RetryPolicy"]

T = TypeVar("T")
log = logging.getLogger("blamequeue")


def _number(where: str, minimum: float, *, integer: bool = False) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if integer:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        else:  # seconds
            ok = is_duration(value, minimum=minimum)
        if not ok:
            kind = "an integer" if integer else f"a number of seconds, at most {MAX_SECONDS_TEXT},"
            raise ConfigError(
                "queue/invalid-config",
                f"{where}.{attribute.name} must be {kind} >= {minimum}, got {value!r}",
            )

    return check


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """``attempts`` tries in all, waiting ``min(base * 2**i, cap)`` seconds between them."""

    attempts: int = attrs.field(default=3, validator=_number("retry", 1, integer=True))
    base: float = attrs.field(default=0.05, validator=_number("retry", 0))
    cap: float = attrs.field(default=1.0, validator=_number("retry", 0))

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(self.attempts):
            try:
                return await fn()
            except QueueError as exc:
                if not exc.retryable or attempt + 1 >= self.attempts:
                    raise
                # Real time on purpose: these are millisecond waits for a store to recover,
                # and a virtual clock that nobody advances must not freeze them.
                await anyio.sleep(min(self.base * 2**attempt, self.cap))
        raise AssertionError("unreachable")  # pragma: no cover


@attrs.define(eq=False)
class CircuitBreaker:
    """Opens after ``failure_threshold`` consecutive retryable failures; after
    ``reset_timeout`` seconds it lets calls through again (half-open) and closes on the first
    success or re-opens on the first failure."""

    failure_threshold: int = attrs.field(default=5, validator=_number("breaker", 1, integer=True))
    reset_timeout: float = attrs.field(default=30.0, validator=_number("breaker", 0))
    clock: Clock | None = None
    on_change: Callable[[str], Awaitable[None]] | None = None
    _failures: int = attrs.field(default=0, init=False)
    _opened_at: float | None = attrs.field(default=None, init=False)

    def _now(self) -> float:
        assert self.clock is not None
        return self.clock.now()

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return "closed"
        if self._now() - self._opened_at >= self.reset_timeout:
            return "half-open"
        return "open"

    def retry_in(self) -> float:
        """Seconds until the breaker lets a call through again (0 unless it is open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.reset_timeout - (self._now() - self._opened_at))

    def check(self, backend: str) -> None:
        if self.state == "open":
            raise BackendUnavailableError(
                f"backend {backend!r} is failing and its circuit breaker is open; calls resume "
                f"on their own in {self.retry_in():.1f} s (see list_backends() for its state)"
            )

    async def success(self) -> None:
        self._failures = 0
        if self._opened_at is not None:
            self._opened_at = None
            if self.on_change is not None:
                await self.on_change("closed")

    async def failure(self) -> None:
        self._failures += 1
        was_open = self._opened_at is not None
        if was_open or self._failures >= self.failure_threshold:
            self._opened_at = self._now()
            if not was_open and self.on_change is not None:
                await self.on_change("open")


@attrs.define(eq=False)
class Guard:
    """Retry + breaker around every call to one backend."""

    backend_name: str
    retry: RetryPolicy
    breaker: CircuitBreaker

    async def call(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T:
        self.breaker.check(self.backend_name)
        try:
            result = await self.retry.run(fn)
        except QueueError as exc:
            if exc.retryable:
                await self.breaker.failure()
            raise
        except Exception as exc:
            # A backend broke the contract and leaked a foreign error: map it here so a consumer
            # never dies of it, and keep the original chained for debugging.
            raise QueueError(
                "queue/backend-unavailable",
                f"backend {self.backend_name!r} failed in {operation} with an unexpected "
                f"{type(exc).__name__}: {exc}; this is a bug in the backend, please report it",
                retryable=False,
            ) from exc
        await self.breaker.success()
        return result


def parse_retry(value: Any, where: str) -> RetryPolicy:
    if value is None:
        return RetryPolicy()
    if isinstance(value, RetryPolicy):
        return value
    return RetryPolicy(**_options(value, where, {"attempts", "base", "cap"}))


def parse_breaker_options(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    return _options(value, where, {"failure_threshold", "reset_timeout"})


def _options(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(
            "queue/invalid-config", f"{where} must be a mapping, got {type(value).__name__}"
        )
    unknown = set(value) - allowed
    if unknown:
        raise ConfigError(
            "queue/invalid-config",
            f"{where} has unknown keys {sorted(map(repr, unknown))}; allowed: {sorted(allowed)}",
        )
    return dict(value)
