"""The system clock; tests pass a virtual one (``blamequeue_testing.VirtualClock``)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import anyio

__all__ = ["SystemClock", "to_datetime"]


class SystemClock:
    """Wall-clock time for timestamps, anyio's sleep for waiting."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


# The last conversion: the jobs of one lease were mostly enqueued together and share their
# times (datetimes are immutable, so handing the same one out is safe).
_last_converted: tuple[float, datetime] = (math.nan, datetime.fromtimestamp(0, tz=UTC))


def to_datetime(seconds: float) -> datetime:
    global _last_converted
    last = _last_converted
    if last[0] == seconds:
        return last[1]
    converted = datetime.fromtimestamp(seconds, tz=UTC)
    _last_converted = (seconds, converted)
    return converted
