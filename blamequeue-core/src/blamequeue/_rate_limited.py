"""Fleet-wide leasing pauses of a queue, after a handler raised ``RateLimited`` (SPEC §15).

A pause is a shared record (kind ``rate_limited``, ``expires_at`` its end), so every process
sharing the backend sees it; consumers and ``tick`` read it where they read the pause flag
(:mod:`._pause`), before they lease, at most once per :data:`~._pause.PAUSE_CHECK` seconds of
the queue's clock.  A consumer of this process stops at once (the handler's raise is noted
here before anything is written) and, idle, wakes when the pause ends.

A later ``RateLimited`` lengthens a pause, never shortens it, and two workers raising at
once must not undo each other: each raise writes a record of its own, keyed by its end so
that the one ending last is listed first (a single ``record_list(..., limit=1)`` reads it),
and each write is atomic on its own.  Records expire with their pause; the sweep removes them.

A backend without shared records (:class:`~blamequeue.abc.Records`) pauses the consumers of
this process only; that is logged once per queue.
"""

from __future__ import annotations

import logging
import math
from typing import Final

from ._pause import PAUSE_CHECK
from ._records import RecordStore
from ._runtime import BackendRuntime
from .errors import QueueError

__all__ = ["note_rate_limit", "rate_limited_until", "share_rate_limit"]

log = logging.getLogger("blamequeue")

KIND: Final = "rate_limited"
_SEPARATOR: Final = "\x1f"  # queue names hold no control character (check_queue_name)
_SPAN: Final = 10**16 - 1
"""Keys count down from here in milliseconds, so the pause ending last sorts first."""


def _prefix(queue: str) -> str:
    return f"{queue}{_SEPARATOR}"


def window_key(queue: str, until: float) -> str:
    """The record key of a pause of ``queue`` ending at ``until``: later ends sort first."""
    millis = min(max(math.ceil(until * 1000), 0), _SPAN)
    return f"{_prefix(queue)}{_SPAN - millis:016d}"


def _merge(runtime: BackendRuntime, queue: str, until: float | None, read_at: float) -> None:
    known = runtime.rate_limited.get(queue)
    if known is not None and known[0] is not None and (until is None or known[0] > until):
        until = known[0]  # a pause only grows: what this process knew still holds
    runtime.rate_limited[queue] = (until, read_at)


def note_rate_limit(runtime: BackendRuntime, queue: str, until: float) -> None:
    """Stop this process's consumers of ``queue`` until ``until`` at once, before the pause
    is shared (:func:`share_rate_limit`)."""
    known = runtime.rate_limited.get(queue)
    _merge(runtime, queue, until, runtime.clock.now() if known is None else known[1])


async def share_rate_limit(runtime: BackendRuntime, queue: str, until: float) -> None:
    """Tell every process sharing the backend that ``queue`` leases nothing until ``until``.
    Never raises: a failed write leaves the pause to this process (logged)."""
    if not runtime.backend.capabilities.records:
        if queue not in runtime.rate_limited_local_only:
            runtime.rate_limited_local_only.add(queue)
            log.warning(
                "backend %r keeps no shared records: a RateLimited raised by a job of %r pauses "
                "the consumers of this process only, not those of other processes",
                runtime.name,
                queue,
            )
        return
    try:
        await RecordStore(runtime).put(
            KIND, window_key(queue, until), {"until": until}, expires_at=until, if_absent=True
        )
    except QueueError as exc:
        log.warning(
            "backend %r: could not share the rate-limit pause of %r (%s); only the consumers "
            "of this process pause",
            runtime.name,
            queue,
            exc,
        )


async def rate_limited_until(
    runtime: BackendRuntime, queue: str, *, fresh: bool = False
) -> float | None:
    """When the rate-limit pause of ``queue`` ends, or ``None`` when it leases freely now.

    From the cache when it is younger than :data:`PAUSE_CHECK` (unless ``fresh``) and the
    pause it knew has not ended since; a backend that cannot be read keeps what was known
    (workers keep working through a blip, as with the pause flag)."""
    now = runtime.clock.now()
    known = runtime.rate_limited.get(queue)
    if known is not None:
        until, read_at = known
        ended_since = until is not None and read_at < until <= now
        if not runtime.backend.capabilities.records or (
            not fresh and not ended_since and now - read_at < PAUSE_CHECK
        ):
            return until if until is not None and until > now else None
    elif not runtime.backend.capabilities.records:
        return None
    try:
        latest = await RecordStore(runtime).list(KIND, prefix=_prefix(queue), limit=1)
    except QueueError as exc:
        log.debug("rate-limit pause of %r on %r unknown: %r", queue, runtime.name, exc)
        if known is None or known[0] is None or known[0] <= now:
            return None
        return known[0]
    # The record's expiry is the pause's end (each window is written with it).
    until = latest[0].expires_at if latest else None
    _merge(runtime, queue, until, now)
    merged = runtime.rate_limited[queue][0]
    return merged if merged is not None and merged > now else None
