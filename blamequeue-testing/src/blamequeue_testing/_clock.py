"""A clock whose time passes only when a test says so.

``Queue(clock=VirtualClock())`` makes leases, delays, backoff, heartbeats and rate limits follow
virtual time: a test calls :meth:`VirtualClock.advance` instead of sleeping, and time that has not
been advanced has not passed.
"""

from __future__ import annotations

import heapq
import itertools
import math

import anyio
import anyio.lowlevel

from blamequeue.errors import BadArgumentError

__all__ = ["VirtualClock"]


class _Sleeper:
    """One pending :meth:`VirtualClock.sleep`."""

    __slots__ = ("after", "deadline", "released", "woken")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.woken = anyio.Event()
        # Set when this sleeper has returned (or given up); the next sleeper woken by the same
        # advance waits for it, so woken tasks resume in deadline order on every event loop
        # (trio deliberately shuffles the order in which woken tasks run).
        self.released = anyio.Event()
        self.after: _Sleeper | None = None


def _seconds(value: object, what: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or math.isnan(value):  # type: ignore[arg-type]
        raise BadArgumentError(
            "queue/bad-argument", f"{what} must be a number of seconds, got {value!r}"
        )
    return float(value)  # type: ignore[arg-type]


async def _settle() -> None:
    # anyio's asyncio implementation of wait_all_tasks_blocked() sleeps 0.1 s of real time
    # whenever it finds a task still running (a cancellation in progress, say); a few plain
    # checkpoints first let such tasks reach their next wait, so it usually returns at once.
    for _ in range(_SETTLE_CHECKPOINTS):
        await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()


_SETTLE_CHECKPOINTS = 20


class VirtualClock:
    """Virtual epoch time for tests; implements :class:`blamequeue.abc.Clock`.

    * :meth:`now` returns the virtual time (seconds since the Unix epoch, ``start`` at first).
    * :meth:`advance` moves it forward and wakes, in deadline order, every :meth:`sleep` whose
      deadline has been reached.  It is a plain method: call it from a test or a task.
    * :meth:`advance_and_settle` steps through each sleeper's deadline in turn and lets the woken
      tasks run until they block again, so a loop that sleeps repeatedly (a heartbeat, a poll)
      sees every virtual instant it would have seen in real time.

    Works on asyncio and trio.  Time never goes backwards.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        start = _seconds(start, "VirtualClock start")
        if math.isinf(start):
            raise BadArgumentError("queue/bad-argument", "VirtualClock start must be finite")
        self._now = start
        self._heap: list[tuple[float, int, _Sleeper]] = []
        self._order = itertools.count()
        self._last_woken: _Sleeper | None = None

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r}, pending_sleepers={self.pending_sleepers})"

    def now(self) -> float:
        """The virtual time, in seconds since the Unix epoch."""
        return self._now

    @property
    def pending_sleepers(self) -> int:
        """How many :meth:`sleep` calls are waiting for time to be advanced."""
        return sum(1 for _, _, sleeper in self._heap if not sleeper.released.is_set())

    @property
    def next_deadline(self) -> float | None:
        """The earliest deadline of a waiting sleeper, or ``None`` when nobody sleeps."""
        self._drop_finished()
        return self._heap[0][0] if self._heap else None

    @property
    def deadlines(self) -> list[float]:
        """The deadlines of the waiting sleepers, earliest first (a test can tell which wait a
        task is in, not only the earliest of them all)."""
        waiting = [entry for entry in self._heap if not entry[2].released.is_set()]
        return sorted(deadline for deadline, _, _ in waiting)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (``>= 0``) and wake the sleepers now due.

        Negative or NaN → :class:`~blamequeue.errors.BadArgumentError` (``queue/bad-argument``).
        """
        seconds = _seconds(seconds, "advance()")
        if seconds < 0:
            raise BadArgumentError(
                "queue/bad-argument",
                f"advance() takes a non-negative number of seconds, got {seconds!r}: "
                "virtual time never goes backwards",
            )
        self._now += seconds
        self._wake_due()

    def set(self, timestamp: float) -> None:
        """Move time forward to ``timestamp`` (epoch seconds, not earlier than :meth:`now`)."""
        timestamp = _seconds(timestamp, "set()")
        if timestamp < self._now:
            raise BadArgumentError(
                "queue/bad-argument",
                f"set({timestamp!r}) is before now ({self._now!r}): "
                "virtual time never goes backwards",
            )
        self.advance(timestamp - self._now)

    async def advance_and_settle(self, seconds: float) -> None:
        """Advance by ``seconds`` one sleeper deadline at a time, letting tasks run in between.

        At each deadline up to ``now() + seconds`` (including ones set by tasks woken on the
        way) time stops there, the sleepers due are woken and every task runs until it blocks
        again (:func:`anyio.wait_all_tasks_blocked`).  Then time moves to the target and tasks
        settle once more.  Work running in threads is not waited for.
        """
        seconds = _seconds(seconds, "advance_and_settle()")
        if seconds < 0 or math.isinf(seconds):
            raise BadArgumentError(
                "queue/bad-argument",
                f"advance_and_settle() takes a finite, non-negative number of seconds, "
                f"got {seconds!r}",
            )
        target = self._now + seconds
        while True:
            deadline = self.next_deadline
            if deadline is None or deadline > target:
                break
            self.advance(max(0.0, deadline - self._now))
            await _settle()
        self.advance(target - self._now)
        await _settle()

    async def sleep(self, seconds: float) -> None:
        """Return once virtual time has advanced by ``seconds``.

        ``seconds <= 0`` returns after one checkpoint; NaN is refused with
        ``queue/bad-argument``; ``inf`` sleeps until cancelled.
        """
        seconds = _seconds(seconds, "sleep()")
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        sleeper = _Sleeper(self._now + seconds)
        heapq.heappush(self._heap, (sleeper.deadline, next(self._order), sleeper))
        try:
            await sleeper.woken.wait()
            if sleeper.after is not None:
                await sleeper.after.released.wait()
        finally:
            # Also on cancellation: never leave the next sleeper waiting for us.
            sleeper.released.set()

    def _wake_due(self) -> None:
        previous = self._last_woken
        if previous is not None and previous.released.is_set():
            previous = None
        while self._heap and self._heap[0][0] <= self._now:
            _, _, sleeper = heapq.heappop(self._heap)
            if sleeper.released.is_set():  # cancelled while waiting
                continue
            sleeper.after = previous
            sleeper.woken.set()
            previous = sleeper
        self._last_woken = previous

    def _drop_finished(self) -> None:
        while self._heap and self._heap[0][2].released.is_set():
            heapq.heappop(self._heap)
