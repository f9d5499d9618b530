"""What a handler raises to choose its job's outcome, beyond failing an attempt (SPEC §15).

Any other exception fails the attempt: the job is retried with backoff while attempts remain,
then dead-lettered.
"""

from __future__ import annotations

__all__ = ["UnrecoverableError"]


class UnrecoverableError(Exception):
    """Raise it in a handler when no retry can help (an order cancelled upstream, an account
    closed): the job goes to the dead-letter queue at once, whatever attempts it has left, with
    this error as its ``last_error``.  The attempt counts as failed (``TickResult.failed``,
    ``moved_to_dlq``), as a last failed attempt does."""
