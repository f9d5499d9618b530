"""The in-process tallies behind the backend-kept metrics (:mod:`blamequeue._metrics`): a
dict update per settled job on the worker's hot path, flushed to the backend once a second."""

from __future__ import annotations

import bisect
from collections.abc import Mapping

import anyio
import attrs

__all__ = [
    "DURATION_BUCKETS",
    "ERRORS_PER_FLUSH",
    "MetricsBuffer",
    "PendingError",
    "Tally",
    "Totals",
]

ERRORS_PER_FLUSH = 10
"""Errors kept per queue between two flushes: a failure storm cannot become a write storm."""

_ERROR_CHARS = 500


@attrs.define
class Tally:
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    duration_sum: float = 0.0
    duration_count: int = 0

    def count(self, outcome: str, duration: float | None) -> None:
        """One settled attempt: ``done``, ``retry`` or ``dead``, having run ``duration`` s."""
        if outcome == "done":
            self.succeeded += 1
        else:
            self.failed += 1
            if outcome == "dead":
                self.dead += 1
        if duration is not None and duration >= 0:
            self.duration_sum += duration
            self.duration_count += 1


DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the processing-duration histogram's buckets (``+Inf`` follows)."""


def _bucket_names() -> tuple[str, ...]:
    return (*(f"le:{bound:g}" for bound in DURATION_BUCKETS), "le:+Inf")


_BUCKETS = _bucket_names()


@attrs.define
class Totals(Tally):
    """A queue's settled attempts since its figures were first kept, with the durations'
    histogram: ``buckets[i]`` counts the durations in bucket ``i`` alone (at most
    ``DURATION_BUCKETS[i]`` and above the bound before it; the last one above every bound)."""

    buckets: list[int] = attrs.field(factory=lambda: [0] * len(_BUCKETS))

    def count(self, outcome: str, duration: float | None) -> None:
        super().count(outcome, duration)
        if duration is not None and duration >= 0:
            self.buckets[bisect.bisect_left(DURATION_BUCKETS, duration)] += 1

    def merge(self, other: Totals) -> None:
        for name in _TALLY:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]

    def counters(self) -> dict[str, float]:
        """The shared record's counters these totals add to (those that are not zero)."""
        named = {name: getattr(self, name) for name in _TALLY}
        named.update(zip(_BUCKETS, self.buckets, strict=True))
        return {name: value for name, value in named.items() if value}

    @classmethod
    def from_counters(cls, counters: Mapping[str, float]) -> Totals:
        totals = cls(buckets=[int(counters.get(name, 0)) for name in _BUCKETS])
        for name in _TALLY:
            # The type of the field's default: int counts, the float sum of durations.
            setattr(totals, name, type(getattr(totals, name))(counters.get(name, 0)))
        return totals


_TALLY = tuple(field.name for field in attrs.fields(Tally))


@attrs.define
class PendingError:
    queue: str
    job_id: str
    at: float
    error: str
    attempts: int
    dead: bool


@attrs.define
class MetricsBuffer:
    """One process's tallies for one backend, until the next flush."""

    tallies: dict[tuple[str, int], Tally] = attrs.field(factory=dict)
    errors: dict[str, list[PendingError]] = attrs.field(factory=dict)
    totals: dict[str, Totals] = attrs.field(factory=dict)
    """Per queue, what the next flush adds to the all-time totals."""
    kept: dict[str, Totals] = attrs.field(factory=dict)
    """Per queue, the all-time totals of this process, for a backend that keeps no shared
    records (the flushes add to them instead of the backend's)."""
    _flushing: anyio.Lock | None = attrs.field(default=None, init=False)

    @property
    def flushing(self) -> anyio.Lock:
        """Held while a flush writes: a second flush waits for it, so when any flush returns,
        everything observed before it is in the backend (a reader in another process sees
        the errors with the counts, never the counts alone)."""
        if self._flushing is None:
            self._flushing = anyio.Lock()
        return self._flushing

    def observe(
        self,
        *,
        queue: str,
        job_id: str,
        outcome: str,
        at: float,
        duration: float | None,
        attempts: int,
        error: str | None,
    ) -> None:
        """Count one applied settlement (``done``, ``retry`` or ``dead``)."""
        key = (queue, int(at // 60))
        tally = self.tallies.get(key)
        if tally is None:
            tally = self.tallies[key] = Tally()
        tally.count(outcome, duration)
        if outcome != "done":
            pending = self.errors.setdefault(queue, [])
            if len(pending) < ERRORS_PER_FLUSH:
                text = (error or "")[:_ERROR_CHARS]
                pending.append(PendingError(queue, job_id, at, text, attempts, outcome == "dead"))
        totals = self.totals.get(queue)
        if totals is None:
            totals = self.totals[queue] = Totals()
        totals.count(outcome, duration)

    def take(
        self,
    ) -> tuple[dict[tuple[str, int], Tally], dict[str, list[PendingError]], dict[str, Totals]]:
        tallies, errors, totals = self.tallies, self.errors, self.totals
        self.tallies, self.errors, self.totals = {}, {}, {}
        return tallies, errors, totals

    def keep(self, totals: Mapping[str, Totals]) -> None:
        """Add flushed totals to this process's own (a backend without shared records)."""
        for queue, more in totals.items():
            self.kept.setdefault(queue, Totals()).merge(more)

    def __bool__(self) -> bool:
        return bool(self.tallies or self.errors or self.totals)
