"""What a handler raises to choose its job's outcome, beyond failing an attempt (SPEC §15).

Any other exception fails the attempt: the job is retried with backoff while attempts remain,
then dead-lettered.
"""

from __future__ import annotations

from typing import Any

from ._validation import MAX_SECONDS_TEXT, is_duration
from .errors import BadArgumentError

__all__ = ["RateLimited", "RetryLater", "UnrecoverableError"]


class UnrecoverableError(Exception):
    """Raise it in a handler when no retry can help (an order cancelled upstream, an account
    closed): the job goes to the dead-letter queue at once, whatever attempts it has left, with
    this error as its ``last_error``.  The attempt counts as failed (``TickResult.failed``,
    ``moved_to_dlq``), as a last failed attempt does."""


def _checked_seconds(cls: type, seconds: Any) -> float:
    if not is_duration(seconds):
        raise BadArgumentError(
            "queue/bad-argument",
            f"{cls.__name__}(seconds): seconds must be a finite number >= 0 and at most "
            f"{MAX_SECONDS_TEXT}, got {seconds!r}",
        )
    return float(seconds)


class RetryLater(Exception):
    """Raise it in a handler when the job cannot run *yet* (a resource not ready, a
    dependency still warming up): the job goes back to pending, due ``seconds`` from now, and
    the attempt is given back, so it does not count against ``max_attempts`` and its
    ``last_error`` is left as it was.  Neither a success nor a failure: ``TickResult.deferred``
    and ``ConsumerStats.deferred`` count it, and the worker raises ``job.retrying`` (never
    ``job.failed``), with ``data["deferred"]``.

    ``seconds`` is a finite number from 0 to 10 years; anything else raises
    ``queue/bad-argument`` where the exception is made, which in a handler fails the attempt
    like any other error (retried with backoff, the message in ``last_error``).

    On SQS a FIFO queue cannot give an attempt back (the receive count is the server's): the
    delay is honoured, the attempt counted.
    """

    seconds: float
    """How long the job waits before it is due again."""

    def __init__(self, seconds: float) -> None:
        self.seconds = _checked_seconds(type(self), seconds)
        super().__init__(seconds)

    def __str__(self) -> str:
        return f"retry in {self.seconds:g} s"


class RateLimited(RetryLater):
    """Raise it in a handler when the service the job calls said "too many requests": the job
    is deferred as :class:`RetryLater` does (back to pending ``seconds`` from now, the attempt
    given back), and every consumer of the job's queue on that backend, in every process,
    stops leasing from it for ``seconds`` (``tick`` leases nothing meanwhile).  A later
    ``RateLimited`` may lengthen the pause, never shorten it.

    Consumers in this process stop at once and resume the moment the pause ends.  Other
    processes learn of it through the backend's shared records
    (:class:`~blamequeue.abc.Records`), within a second; a backend without them pauses only
    the consumers of this process (logged once per queue).
    """
