"""A consumer through a long backend outage: it backs off, never dies, and once the backend is
back it leases again as soon as its circuit breaker lets calls through (SPEC §3.10).

Regression: the consumer doubled its backoff on every refusal of its own open breaker, calls
that never reached the backend, so after a long outage it slept up to 30 s more after the
backend was back (the Redis restart scenario in tests/reliability measured it).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from blamequeue import Job, JobContext, Queue
from blamequeue._plugins import Registration, load_registry
from blamequeue.abc import Lease, WorkerRecord
from blamequeue.errors import BackendUnavailableError
from blamequeue_testing import VirtualClock
from blamequeue_testing._memory import MemoryBackend

pytestmark = pytest.mark.anyio

RESET = 5.0
POLL = 1.0


class OutageBackend(MemoryBackend):
    """A memory backend that, while ``down``, fails every call a consumer makes, like a
    server that does not answer."""

    protocol = "outage-memory"
    down = False

    def _check(self) -> None:
        if OutageBackend.down:
            raise BackendUnavailableError("the store is restarting")

    async def lease(self, queue: str, **kwargs: Any) -> list[Lease]:
        self._check()
        return await super().lease(queue, **kwargs)

    async def wait_for_work(self, queue: str, *, timeout: float) -> None:
        self._check()
        await super().wait_for_work(queue, timeout=timeout)

    async def worker_heartbeat(self, worker: WorkerRecord) -> None:
        self._check()
        await super().worker_heartbeat(worker)


@pytest.fixture
def outage(monkeypatch: pytest.MonkeyPatch) -> type[OutageBackend]:
    monkeypatch.setitem(
        load_registry().protocols,
        "outage-memory",
        Registration(value=OutageBackend, plugin="tests"),
    )
    monkeypatch.setattr(OutageBackend, "down", False)
    return OutageBackend


async def test_a_consumer_leases_again_once_the_breaker_lets_calls_through_after_a_long_outage(
    outage: type[OutageBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    config = {
        "protocol": "outage-memory",
        "retry": {"attempts": 1, "base": 0, "cap": 0},
        "breaker": {"failure_threshold": 2, "reset_timeout": RESET},
    }
    ran: list[Any] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        ran.append(job.payload)

    async with Queue(backends={"b": config}, clock=clock, sweep_interval=0) as queue:
        monkeypatch.setattr(outage, "down", True)
        await queue.enqueue("q", "waited out the outage")
        consumer = await queue.consume("q", handler, poll_interval=POLL)
        await clock.advance_and_settle(600.0)  # ten minutes down
        assert queue.list_backends()[0].breaker_state == "open"
        assert not consumer.stopped, "the consumer rides the outage out"
        assert ran == []

        monkeypatch.setattr(outage, "down", False)
        # At most one reset time until the breaker lets the next lease through, plus one poll.
        await clock.advance_and_settle(RESET + POLL)
        assert ran == ["waited out the outage"]
        assert queue.list_backends()[0].breaker_state == "closed"
        assert not consumer.stopped


async def test_a_consumer_still_backs_off_exponentially_while_the_breaker_stays_closed(
    outage: type[OutageBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    config = {
        "protocol": "outage-memory",
        "retry": {"attempts": 1, "base": 0, "cap": 0},
        # Never opens: every failure reaches the backend, and the consumer spaces them out.
        "breaker": {"failure_threshold": 1_000_000, "reset_timeout": RESET},
    }
    calls: list[float] = []
    real_lease = OutageBackend.lease

    async def counted(self: OutageBackend, queue: str, **kwargs: Any) -> list[Lease]:
        calls.append(clock.now())
        return await real_lease(self, queue, **kwargs)

    monkeypatch.setattr(OutageBackend, "lease", counted)
    async with Queue(backends={"b": config}, clock=clock, sweep_interval=0) as queue:
        monkeypatch.setattr(outage, "down", True)
        consumer = await queue.consume("q", lambda job, ctx: None, poll_interval=POLL)
        await clock.advance_and_settle(0.0)  # its first lease fails; it starts backing off
        await clock.advance_and_settle(120.0)
        gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
        assert gaps[:5] == [2.0, 4.0, 8.0, 16.0, 30.0]
        assert set(gaps[4:]) == {30.0}
        assert not consumer.stopped
