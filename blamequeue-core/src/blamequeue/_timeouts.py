"""Per-job handler timeouts (``enqueue(..., timeout=seconds)``).

The limit travels in the job's ``meta`` (key :data:`TIMEOUT_KEY`), so every worker of every
process enforces the one the producer set.  It is measured on the queue's clock, not with
``anyio.move_on_after``: a :class:`~blamequeue_testing.VirtualClock` then shows a ten-minute
timeout without anybody waiting ten minutes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ._job_meta import TIMEOUT_KEY
from .abc import Clock

__all__ = ["TIMEOUT_KEY", "run_within", "timeout_error"]

T = TypeVar("T")


def timeout_error(seconds: float) -> str:
    """The ``last_error`` of an attempt stopped by its timeout."""
    return f"timeout: handler ran longer than {seconds:g} s and was cancelled"


async def run_within(
    clock: Clock, seconds: float, call: Callable[[], Awaitable[T]]
) -> tuple[bool, T | None]:
    """Run ``call`` and cancel it once ``seconds`` of ``clock`` time have passed.

    Returns ``(False, result)`` when it finished in time, ``(True, None)`` when the limit
    cancelled it.  ``call`` must not raise anything but cancellation (a failure is a value of
    the caller's, not an exception crossing this task group).
    """
    expired = False
    result: T | None = None
    # Measured from now, not from when the watchdog task gets to run.
    deadline = clock.now() + seconds
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as limited:

            async def watchdog() -> None:
                nonlocal expired
                await clock.sleep(deadline - clock.now())
                expired = True
                limited.cancel()

            tg.start_soon(watchdog)
            result = await call()
        tg.cancel_scope.cancel()
    if expired and limited.cancelled_caught:
        return True, None
    return False, result
