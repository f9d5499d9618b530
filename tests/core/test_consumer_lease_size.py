"""How much a consumer asks for in one lease: all its free slots, or half its concurrency on a
backend whose leases overlap well with running handlers (``Backend.overlapped_lease``: redis
on asyncio), so the next lease travels while the handlers of the last one run.  Never more
leases held than ``concurrency``."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from blamequeue import Job, JobContext, Queue
from blamequeue._plugins import Registration, load_registry
from blamequeue.abc import Lease, OverlappedLease
from blamequeue_testing._memory import MemoryBackend

pytestmark = pytest.mark.anyio

CONCURRENCY = 10
JOBS = 60


class CountingBackend(MemoryBackend):
    """A memory backend recording the ``limit`` of every lease and the most leases held."""

    protocol = "counting-memory"
    limits: ClassVar[list[int]] = []

    async def lease(self, queue: str, **kwargs: Any) -> list[Lease]:
        CountingBackend.limits.append(kwargs["limit"])
        return await super().lease(queue, **kwargs)


class ServerLikeBackend(CountingBackend, OverlappedLease):
    protocol = "server-like-memory"

    @property
    def overlapped_lease(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    for backend in (CountingBackend, ServerLikeBackend):
        monkeypatch.setitem(
            load_registry().protocols,
            backend.protocol,
            Registration(value=backend, plugin="tests"),
        )
    monkeypatch.setattr(CountingBackend, "limits", [])


async def drain(protocol: str) -> int:
    """Run JOBS jobs at CONCURRENCY; the most handlers that ran at once."""
    running = most = done = 0
    finished = anyio.Event()

    async def handler(job: Job, ctx: JobContext) -> None:
        nonlocal running, most, done
        running += 1
        most = max(most, running)
        await anyio.sleep(0.05)
        running -= 1
        done += 1
        if done == JOBS:
            finished.set()

    async with Queue(backends={"m": {"protocol": protocol}}) as queue:
        await queue.enqueue_many("q", list(range(JOBS)))
        await queue.consume("q", handler, concurrency=CONCURRENCY)
        with anyio.fail_after(10):
            await finished.wait()
    return most


async def test_an_in_process_store_is_asked_for_every_free_slot() -> None:
    most = await drain("counting-memory")
    assert CountingBackend.limits[0] == CONCURRENCY
    assert max(CountingBackend.limits) == CONCURRENCY
    assert most <= CONCURRENCY


async def test_a_server_is_asked_for_half_the_concurrency_at_a_time() -> None:
    most = await drain("server-like-memory")
    assert max(CountingBackend.limits) == CONCURRENCY // 2
    # The halves overlap: both are held at once, never more than the concurrency.
    assert most == CONCURRENCY
