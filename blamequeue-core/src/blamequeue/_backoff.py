"""Retry delays after a failed attempt.

The default is deterministic exponential: after the n-th failed attempt a job waits
``min(1 s * 2**(n-1), 300 s)``.  Jitter is optional and reproducible: it is derived from a hash of
the job id and the attempt number, so a test can predict every delay.

A task or a consumer may also compute the delay with a function of the attempt and the error
(:data:`BackoffFunction`, SPEC §15).  A function cannot travel inside a stored job, so it lives
where the task is registered or ``consume`` was called; which backoff applies to a failed
attempt is decided once, by :func:`retry_delay`: the job's own, then the task's, then
``consume``'s (or ``tick``'s), then the backend's.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

import attrs

from ._validation import MAX_SECONDS_TEXT, is_duration
from .errors import BadArgumentError, QueueError

__all__ = [
    "Backoff",
    "BackoffFunction",
    "BackoffOption",
    "ExponentialBackoff",
    "FixedBackoff",
    "LinearBackoff",
    "ScheduleBackoff",
    "parse_backoff",
    "parse_backoff_option",
    "retry_delay",
]

log = logging.getLogger("blamequeue")


@runtime_checkable
class Backoff(Protocol):
    """A retry-delay strategy."""

    def delay(self, attempt: int, job_id: str) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based) of ``job_id``."""
        ...

    def to_spec(self) -> dict[str, Any]:
        """A JSON-able mapping that :func:`parse_backoff` turns back into this strategy."""
        ...


def _jittered(delay: float, jitter: float, attempt: int, job_id: str) -> float:
    if not jitter:
        return delay
    digest = hashlib.blake2b(f"{job_id}:{attempt}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64  # uniform in [0, 1)
    return delay * (1.0 - jitter * fraction)


def _seconds(name: str, minimum: float = 0.0) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not is_duration(value, minimum=minimum):
            raise BadArgumentError(
                "queue/bad-argument",
                f"backoff {name}.{attribute.name} must be a number >= {minimum} and at most "
                f"{MAX_SECONDS_TEXT}, got {value!r}",
            )

    return check


def _jitter_check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not 0.0 <= value <= 1.0:
        raise BadArgumentError(
            "queue/bad-argument",
            f"backoff jitter must be a fraction between 0 and 1 (0.25 = up to 25 % shorter), "
            f"got {value!r}",
        )


@attrs.frozen(kw_only=True)
class ExponentialBackoff:
    """``min(base * factor**(n-1), cap)``."""

    base: float = attrs.field(default=1.0, validator=_seconds("exponential"))
    factor: float = attrs.field(default=2.0, validator=_seconds("exponential", 1.0))
    cap: float = attrs.field(default=300.0, validator=_seconds("exponential"))
    jitter: float = attrs.field(default=0.0, validator=_jitter_check)

    def delay(self, attempt: int, job_id: str) -> float:
        exponent = max(0, attempt - 1)
        # Past ~1000 doublings float overflows (sooner for a larger factor); the cap has long
        # been reached by then.
        try:
            raw = self.cap if exponent > 1000 else self.base * self.factor**exponent
        except OverflowError:
            raw = self.cap
        return _jittered(min(raw, self.cap), self.jitter, attempt, job_id)

    def to_spec(self) -> dict[str, Any]:
        return {"strategy": "exponential", **attrs.asdict(self)}


@attrs.frozen(kw_only=True)
class FixedBackoff:
    """The same delay after every failure."""

    delay_seconds: float = attrs.field(alias="delay", validator=_seconds("fixed"))
    jitter: float = attrs.field(default=0.0, validator=_jitter_check)

    def delay(self, attempt: int, job_id: str) -> float:
        return _jittered(self.delay_seconds, self.jitter, attempt, job_id)

    def to_spec(self) -> dict[str, Any]:
        return {"strategy": "fixed", "delay": self.delay_seconds, "jitter": self.jitter}


@attrs.frozen(kw_only=True)
class LinearBackoff:
    """``min(base + step * (n-1), cap)``."""

    base: float = attrs.field(default=1.0, validator=_seconds("linear"))
    step: float = attrs.field(default=1.0, validator=_seconds("linear"))
    cap: float = attrs.field(default=300.0, validator=_seconds("linear"))
    jitter: float = attrs.field(default=0.0, validator=_jitter_check)

    def delay(self, attempt: int, job_id: str) -> float:
        raw = self.base + self.step * max(0, attempt - 1)
        return _jittered(min(raw, self.cap), self.jitter, attempt, job_id)

    def to_spec(self) -> dict[str, Any]:
        return {"strategy": "linear", **attrs.asdict(self)}


def _schedule_check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not value:
        raise BadArgumentError(
            "queue/bad-argument", "a backoff schedule needs at least one delay, e.g. [10, 30, 60]"
        )
    for item in value:
        _seconds("schedule")(instance, attribute, item)


@attrs.frozen(kw_only=True)
class ScheduleBackoff:
    """An explicit list: the n-th failure waits ``schedule[n-1]``; past its end, the last."""

    schedule: tuple[float, ...] = attrs.field(converter=tuple, validator=_schedule_check)
    jitter: float = attrs.field(default=0.0, validator=_jitter_check)

    def delay(self, attempt: int, job_id: str) -> float:
        index = min(max(0, attempt - 1), len(self.schedule) - 1)
        return _jittered(float(self.schedule[index]), self.jitter, attempt, job_id)

    def to_spec(self) -> dict[str, Any]:
        return {"strategy": "schedule", "schedule": list(self.schedule), "jitter": self.jitter}


DEFAULT_BACKOFF = ExponentialBackoff()

_STRATEGIES: dict[str, type[Any]] = {
    "exponential": ExponentialBackoff,
    "fixed": FixedBackoff,
    "linear": LinearBackoff,
    "schedule": ScheduleBackoff,
}


def parse_backoff(value: Any, *, where: str = "backoff") -> Backoff:
    """Turn a strategy object, a list of delays or a ``{"strategy": ...}`` mapping into a
    :class:`Backoff`; ``None`` gives the default."""
    if value is None:
        return DEFAULT_BACKOFF
    if isinstance(value, Backoff):
        return value
    if isinstance(value, list | tuple):
        return ScheduleBackoff(schedule=value)
    if isinstance(value, Mapping):
        options = dict(value)
        name = options.pop("strategy", "exponential")
        cls = _STRATEGIES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise BadArgumentError(
                "queue/bad-argument",
                f"{where}: unknown strategy {name!r}; use one of {sorted(_STRATEGIES)}",
            )
        try:
            result: Backoff = cls(**options)
        except TypeError as exc:
            raise BadArgumentError(
                "queue/bad-argument", f"{where}: bad options for strategy {name!r}: {exc}"
            ) from exc
        return result
    if callable(value) and not isinstance(value, type):
        raise BadArgumentError(
            "queue/bad-argument",
            f"{where}: a backoff function cannot be stored with a job; declare it on the task "
            f"(@queue.task(backoff=...)) or give it to consume(..., backoff=...)",
        )
    raise BadArgumentError(
        "queue/bad-argument",
        f"{where} must be a Backoff, a list of delays like [10, 30, 60], or a mapping like "
        f'{{"strategy": "exponential", "base": 1, "cap": 300}}; got {type(value).__name__}',
    )


def backoff_spec(value: Sequence[float] | Mapping[str, Any] | Backoff) -> dict[str, Any]:
    return parse_backoff(value).to_spec()


BackoffFunction: TypeAlias = Callable[[int, BaseException], float]
"""``(attempt, error) -> seconds``: ``attempt`` is the number of the attempt that just failed
(1 for the first), ``error`` what it raised; the answer is the delay in seconds."""

BackoffOption: TypeAlias = Backoff | Sequence[float] | Mapping[str, Any] | BackoffFunction
"""What a task's or ``consume``'s ``backoff`` takes: a strategy, a list of delays, a mapping
spec (as :func:`parse_backoff` reads them) or a :data:`BackoffFunction`."""


def parse_backoff_option(value: Any, *, where: str = "backoff") -> Backoff | BackoffFunction | None:
    """A task's or a consumer's backoff, checked where it is declared: ``None``, a strategy
    (from anything :func:`parse_backoff` reads) or a plain function; anything else, an
    ``async`` function included, is ``queue/bad-argument``."""
    if value is None or isinstance(value, Backoff):
        return value
    if callable(value) and not isinstance(value, type):
        if inspect.iscoroutinefunction(value) or inspect.iscoroutinefunction(
            getattr(value, "__call__", None)  # noqa: B004 - async callable objects
        ):
            raise BadArgumentError(
                "queue/bad-argument",
                f"{where} must be a plain function (attempt, error) -> seconds, not an async "
                f"one: the delay is decided inside the settlement, got {value!r}",
            )
        function: BackoffFunction = value
        return function
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple | Mapping):
        raise BadArgumentError(
            "queue/bad-argument",
            f"{where} must be a function (attempt, error) -> seconds, a Backoff, a list of "
            f"delays like [10, 30, 60], or a mapping like "
            f'{{"strategy": "exponential", "base": 1, "cap": 300}}; got {type(value).__name__}',
        )
    return parse_backoff(value, where=where)


def _asked(
    function: BackoffFunction,
    attempt: int,
    error: BaseException,
    job_id: str,
    log_extra: Mapping[str, Any],
) -> float | None:
    """The answer of a backoff function, or ``None`` (logged) when it is not a delay."""
    try:
        answer: Any = function(attempt, error)
    except Exception as exc:
        log.warning(
            "job %s: the backoff function %r raised %r; using the backend's backoff",
            job_id,
            function,
            exc,
            extra=log_extra,
        )
        return None
    if inspect.iscoroutine(answer):
        answer.close()  # never awaited: a delay is a number, not a coroutine
    if not is_duration(answer):
        log.warning(
            "job %s: the backoff function %r answered %r, not a number of seconds from 0 to "
            "%s; using the backend's backoff",
            job_id,
            function,
            answer,
            MAX_SECONDS_TEXT,
            extra=log_extra,
        )
        return None
    return float(answer)


def retry_delay(
    *,
    attempt: int,
    job_id: str,
    error: BaseException,
    own: Any,
    task: BackoffFunction | None,
    worker: Backoff | BackoffFunction | None,
    backend: Backoff,
    log_extra: Mapping[str, Any],
) -> float:
    """Seconds a job waits after failed attempt number ``attempt``: from the first backoff
    of the job's ``own`` spec (its meta), the ``task``'s function, the ``worker``'s (``consume``
    or ``tick``) and the ``backend``'s.  An unreadable spec or a function that raises or
    answers no valid delay is logged (with ``log_extra``, the job's fields) and falls back to
    the backend's backoff."""
    if own is not None:
        try:
            return parse_backoff(own).delay(attempt, job_id)
        except QueueError:
            log.warning(
                "job %s has an unreadable backoff; using the backend's", job_id, extra=log_extra
            )
            return backend.delay(attempt, job_id)
    for choice in (task, worker):
        if choice is None:
            continue
        if isinstance(choice, Backoff):
            return choice.delay(attempt, job_id)
        answer = _asked(choice, attempt, error, job_id, log_extra)
        return backend.delay(attempt, job_id) if answer is None else answer
    return backend.delay(attempt, job_id)
