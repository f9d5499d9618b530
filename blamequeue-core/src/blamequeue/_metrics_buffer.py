"""The in-process tallies behind the backend-kept metrics (:mod:`blamequeue._metrics`): a
dict update per settled job on the worker's hot path, flushed to the backend once a second."""

from __future__ import annotations

import anyio
import attrs

__all__ = ["ERRORS_PER_FLUSH", "MetricsBuffer", "PendingError", "Tally"]

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
        if outcome == "done":
            tally.succeeded += 1
        else:
            tally.failed += 1
            if outcome == "dead":
                tally.dead += 1
            pending = self.errors.setdefault(queue, [])
            if len(pending) < ERRORS_PER_FLUSH:
                text = (error or "")[:_ERROR_CHARS]
                pending.append(PendingError(queue, job_id, at, text, attempts, outcome == "dead"))
        if duration is not None and duration >= 0:
            tally.duration_sum += duration
            tally.duration_count += 1

    def take(self) -> tuple[dict[tuple[str, int], Tally], dict[str, list[PendingError]]]:
        tallies, errors = self.tallies, self.errors
        self.tallies, self.errors = {}, {}
        return tallies, errors

    def __bool__(self) -> bool:
        return bool(self.tallies or self.errors)
