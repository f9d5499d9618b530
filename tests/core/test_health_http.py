"""``blamequeue.health_app`` served over real HTTP (hypercorn on the test's own event loop,
asyncio or trio), asked by an HTTP client: 200 / 207 / 503 with the report as JSON."""

from __future__ import annotations

import httpx
import pytest

import blamequeue
from asgi_server import serving
from blamequeue import HealthThresholds, Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio


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
