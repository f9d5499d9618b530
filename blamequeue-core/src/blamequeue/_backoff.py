"""Retry delays after a failed attempt.

The default is deterministic exponential: after the n-th failed attempt a job waits
``min(1 s * 2**(n-1), 300 s)``.  Jitter is optional and reproducible: it is derived from a hash of
the job id and the attempt number, so a test can predict every delay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ._validation import MAX_SECONDS_TEXT, is_duration
from .errors import BadArgumentError

__all__ = [
    "Backoff",
    "ExponentialBackoff",
    "FixedBackoff",
    "LinearBackoff",
    "ScheduleBackoff",
    "parse_backoff",
]


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
    raise BadArgumentError(
        "queue/bad-argument",
        f"{where} must be a Backoff, a list of delays like [10, 30, 60], or a mapping like "
        f'{{"strategy": "exponential", "base": 1, "cap": 300}}; got {type(value).__name__}',
    )


def backoff_spec(value: Sequence[float] | Mapping[str, Any] | Backoff) -> dict[str, Any]:
    return parse_backoff(value).to_spec()
