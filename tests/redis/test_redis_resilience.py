"""A Redis restart in the middle of a run: the consumer rides it out.  Calls fail while the
server is down, the circuit breaker opens, and once the server is back (and the breaker's
reset time has passed on the queue's clock) it closes again and work goes on; nothing that
was acknowledged is lost (the server keeps an append-only file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis_helpers import config, start_server

from blamequeue import AuditEvent, Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

SAFETY_NET = 20.0  # real seconds before a wait is declared hung (never reached when it works)


class Recorder:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [event.name for event in self.events if event.name.startswith("system.queue.b")]


async def until(predicate: Callable[[], bool], what: str) -> None:
    try:
        with anyio.fail_after(SAFETY_NET):
            while not predicate():  # noqa: ASYNC110 - state of other tasks, polled
                await anyio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


async def test_consumer_rides_out_a_server_restart() -> None:
    server = start_server(["--appendonly", "yes"])
    clock = VirtualClock()
    audit = Recorder()
    seen: list[Any] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        seen.append(job.payload)

    options = config(
        server.url,
        retry={"attempts": 1},
        breaker={"failure_threshold": 2, "reset_timeout": 30.0},
    )
    queue = Queue(backends={"r": options}, clock=clock, audit_sinks=[audit], sweep_interval=0)
    try:
        async with queue:
            consumer = await queue.consume("q", handler, poll_interval=0.02)
            await queue.enqueue("q", "before")
            # Settled, not only run: a settlement still on its way when the server stops
            # would fail, and the job would come back after its lease.
            await until(lambda: consumer.stats.succeeded == 1, "the job enqueued before the outage")
            assert seen == ["before"]

            server.stop()
            await until(
                lambda: queue.list_backends()[0].breaker_state == "open", "the breaker to open"
            )
            assert audit.names() == ["system.queue.breaker.open"]

            server.start()  # same port, same append-only file
            clock.advance(30.0)  # the breaker's reset time: it lets calls through again
            await until(
                lambda: queue.list_backends()[0].breaker_state == "closed",
                "the breaker to close",
            )
            assert audit.names() == ["system.queue.breaker.open", "system.queue.breaker.close"]

            await queue.enqueue("q", "after")
            await until(lambda: consumer.stats.succeeded == 2, "the job enqueued after it")
            assert seen == ["before", "after"]
            assert await queue.size("q") == 0
    finally:
        server.cleanup()
