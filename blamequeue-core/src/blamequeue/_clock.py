"""The system clock; tests pass a virtual one (``blamequeue_testing.VirtualClock``)."""

from __future__ import annotations

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


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
