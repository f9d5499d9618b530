"""``blamequeue.metrics_app`` served over real HTTP (hypercorn on the test's own event loop,
asyncio or trio) and scraped: the answer is Prometheus text that the reference parser reads,
with every figure per backend and queue, on the memory, local and redis backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import blamequeue
from asgi_server import serving
from blamequeue import Job, JobContext, Queue
from blamequeue_testing import VirtualClock
from blamequeue_testing.servers import RedisServer

pytestmark = pytest.mark.anyio

#: A backend named like a URL with a password: the password must never reach a label.
BACKEND = "redis://:hunter2@cache.internal"
#: A queue name with the characters a label value escapes, and others.
ODD = 'we"ird\\name ü'


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, by name and labels (parsed by prometheus_client)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name, frozenset(sample.labels.items())] = sample.value
    return out


def at(figures: dict[Any, float], name: str, **labels: str) -> float:
    return figures[name, frozenset(labels.items())]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with RedisServer() as server:
        yield server.url


@pytest.fixture(params=["memory", "local", "redis"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "local":
        return {"protocol": "local", "path": str(tmp_path / "jobs.db")}
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        import redis

        with redis.Redis.from_url(url) as raw:
            raw.flushall()
        return {"protocol": "redis", "url": url, "seal": False}
    return {"protocol": "memory"}


async def test_a_scrape_holds_every_figure(config: dict[str, Any], anyio_backend: str) -> None:
    clock = VirtualClock()
    queue = Queue(backends={BACKEND: config}, clock=clock, sweep_interval=0)
    app = blamequeue.metrics_app(queue)

    async def handler(job: Job, ctx: JobContext) -> None:
        if job.payload == "fail":
            raise ValueError("refused")
        clock.advance(0.3)

    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/metrics")).status_code == 503  # not started yet
        async with queue:
            await queue.enqueue(ODD, "waits")
            await queue.enqueue("emails", "fail", max_attempts=1)
            await queue.enqueue("emails", "ok")
            await queue.tick("emails", handler)
            await queue.enqueue("emails", "later", delay=3600)
            await queue.consume("idle", handler)
            clock.advance(90)
            # On the moved clock the consumer's heartbeat is due at once: let it land, or the
            # scrape may find the worker silent for 90 s, so not live.
            with anyio.fail_after(10):
                while not [w for w in await queue.workers() if w.queue == "idle"]:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            answer = await client.get("/metrics")
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert "hunter2" not in answer.text
            figures = samples(answer.text)
            b = "redis://***@cache.internal"
            assert at(figures, "blamequeue_backend_up", backend=b) == 1
            jobs = "blamequeue_queue_jobs"
            expected = {"pending": 0, "delayed": 1, "inflight": 0, "parked": 0,
                        "done": 1, "dead": 1, "cancelled": 0}  # fmt: skip
            held = {s: at(figures, jobs, backend=b, queue="emails", state=s) for s in expected}
            assert held == expected
            assert at(figures, jobs, backend=b, queue=ODD, state="pending") == 1
            age = "blamequeue_queue_oldest_pending_age_seconds"
            assert at(figures, age, backend=b, queue=ODD) == pytest.approx(90, abs=1)
            assert at(figures, age, backend=b, queue="emails") == 0
            assert at(figures, "blamequeue_workers_alive", backend=b, queue="idle") == 1
            assert at(figures, "blamequeue_workers_alive", backend=b, queue="emails") == 0
            emails = {"backend": b, "queue": "emails"}
            assert at(figures, "blamequeue_jobs_processed_total", **emails) == 2
            assert at(figures, "blamequeue_jobs_failed_total", **emails) == 1
            assert at(figures, "blamequeue_jobs_dead_total", **emails) == 1
            duration = "blamequeue_job_duration_seconds"
            assert at(figures, f"{duration}_count", **emails) == 2
            assert at(figures, f"{duration}_sum", **emails) == pytest.approx(0.3, abs=0.01)
            buckets = {le: at(figures, f"{duration}_bucket", **emails, le=le)
                       for le in ("0.005", "0.25", "0.5", "+Inf")}  # fmt: skip
            assert buckets == {"0.005": 1, "0.25": 1, "0.5": 2, "+Inf": 2}
            head = await client.head("/metrics")
            assert (head.status_code, head.content) == (200, b"")
            refused = await client.post("/metrics")
            assert (refused.status_code, refused.headers["allow"]) == (405, "GET, HEAD")


async def test_totals_are_the_fleets(tmp_path: Path, anyio_backend: str) -> None:
    """The endpoint of a queue that runs nothing counts what another one (a worker sharing
    the SQLite file) settled, once that one flushed: the totals live in the backend."""
    config = {"l": {"protocol": "local", "path": str(tmp_path / "jobs.db")}}
    observer = Queue(backends=config)
    app = blamequeue.metrics_app(observer)

    async def ok(job: Job, ctx: JobContext) -> None:
        pass

    async with Queue(backends=config) as worker:
        await worker.enqueue_many("orders", [1, 2, 3])
        await worker.tick("orders", ok)  # a tick flushes its figures when it ends
    async with (
        observer,
        serving(app, anyio_backend) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        figures = samples((await client.get("/metrics")).text)
        orders = {"backend": "l", "queue": "orders"}
        assert at(figures, "blamequeue_jobs_processed_total", **orders) == 3
        assert at(figures, "blamequeue_job_duration_seconds_count", **orders) == 3
        assert at(figures, "blamequeue_workers_alive", **orders) == 0
