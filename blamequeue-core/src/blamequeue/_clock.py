"""The system clock; tests pass a virtual one (``blamequeue_testing.VirtualClock``)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import anyio

__all__ = ["EARLIEST", "LATEST", "SystemClock", "to_datetime"]


class SystemClock:
    """Wall-clock time for timestamps, anyio's sleep for waiting."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


# The last conversion: the jobs of one lease were mostly enqueued together and share their
# times (datetimes are immutable, so handing the same one out is safe).
_last_converted: tuple[float, datetime] = (math.nan, datetime.fromtimestamp(0, tz=UTC))


#: What a stored time beyond what a datetime can hold reads as (SPEC §14): the core refuses
#: durations over ten years, but a store written by hand or an older version may hold one, and
#: listing or inspecting such a job must not fail.
LATEST = datetime.max.replace(tzinfo=UTC)
EARLIEST = datetime.min.replace(tzinfo=UTC)


def to_datetime(seconds: float) -> datetime:
    """The UTC datetime of a stored time; one out of a datetime's range (or NaN) is clamped
    to :data:`EARLIEST` / :data:`LATEST` instead of raising."""
    global _last_converted
    last = _last_converted
    if last[0] == seconds:
        return last[1]
    try:
        converted = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, ValueError, OSError):
        converted = EARLIEST if seconds < 0 else LATEST
    _last_converted = (seconds, converted)
    return converted
