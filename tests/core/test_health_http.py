"""``blamequeue.health_app`` served over real HTTP (hypercorn on the test's own event loop,
asyncio or trio), asked by an HTTP client: 200 / 207 / 503 with the report as JSON."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from hypercorn.config import Config

import blamequeue
from blamequeue import HealthThresholds, Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def serving(app: Any, anyio_backend: str) -> AsyncIterator[str]:
    port = _free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    stop = anyio.Event()
    if anyio_backend == "trio":
        from hypercorn.trio import serve
    else:
        from hypercorn.asyncio import serve  # type: ignore[assignment]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(app, config, shutdown_trigger=stop.wait))
        with anyio.fail_after(10):
            while True:  # until the server listens
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.02)
                    continue
                await stream.aclose()
                break
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop.set()


async def test_status_codes_follow_the_report(anyio_backend: str) -> None:
    clock = VirtualClock()
    queue = Queue(backends={"m": {"protocol": "memory"}}, clock=clock, sweep_interval=0)
    app = blamequeue.health_app(queue, HealthThresholds(max_oldest_age=60, max_error_rate=None))
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.get("/health")
        assert answer.status_code == 503  # not started yet
        assert answer.json()["code"] == "queue/not-initialized"
        async with queue:
            await queue.enqueue("emails", "hello")
            answer = await client.get("/health")
            assert answer.status_code == 200
            body = answer.json()
            assert body["status"] == "healthy"
            [emails] = body["queues"]
            assert (emails["name"], emails["pending"]) == ("emails", 1)
            clock.advance(90)
            answer = await client.get("/")
            assert (answer.status_code, answer.json()["status"]) == (207, "degraded")
            assert answer.json()["alerts"][0]["check"] == "oldest_job_age"
            clock.advance(60)
            answer = await client.get("/")
            assert (answer.status_code, answer.json()["status"]) == (503, "unhealthy")

            async def ok(job: Job, ctx: JobContext) -> None:
                pass

            await queue.tick("emails", ok)
            head = await client.head("/")
            assert head.status_code == 200
            assert head.content == b""
            refused = await client.post("/")
            assert refused.status_code == 405
            assert refused.headers["allow"] == "GET, HEAD"
