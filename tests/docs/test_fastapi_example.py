"""docs/examples/fastapi_app.py served by a real ASGI server (hypercorn) on both loops: the
lifespan opens the one Queue, a request handler enqueues (idempotently), the mounted health
check and dashboard answer under their prefixes, and a worker's result shows in the API."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgi_server import serving
from blamequeue import Job, JobContext, QueueError

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fastapi_app.py"
TOKEN = "a-dashboard-token-for-tests"

pytestmark = pytest.mark.anyio


async def _charge(job: Job, ctx: JobContext) -> str:
    return f"charged {job.payload['order']}"


async def test_the_fastapi_example_enqueues_and_mounts_the_apps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    monkeypatch.setenv("ORDERS_DB", str(tmp_path / "orders.db"))
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    example: dict[str, Any] = runpy.run_path(str(EXAMPLE))
    queue = example["queue"]
    async with serving(example["app"], anyio_backend) as url, httpx.AsyncClient() as http:
        placed = await http.post(f"{url}/orders/42")
        again = await http.post(f"{url}/orders/42")
        assert placed.status_code == again.status_code == 202
        assert placed.json() == again.json() == {"job_id": "order-42"}
        assert await queue.size("orders") == 1  # the lifespan's queue, shared by the requests

        assert (await http.get(f"{url}/orders/42")).json()["state"] == "pending"
        assert (await http.get(f"{url}/orders/7")).status_code == 404

        health = await http.get(f"{url}/health/")  # a Mount answers its prefix with a slash
        assert health.status_code in (200, 207, 503)
        assert "backends" in health.json() or "status" in health.json()

        page = await http.get(f"{url}/queues/")
        assert page.status_code == 200
        assert "text/html" in page.headers["content-type"]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        listed = await http.get(f"{url}/queues/api/overview", headers=auth)
        assert listed.status_code == 200
        assert "orders" in listed.text
        assert (await http.get(f"{url}/queues/api/overview")).status_code == 401

        assert (await queue.tick("orders", _charge)).succeeded == 1
        assert (await http.get(f"{url}/orders/42")).json()["state"] == "done"
    with pytest.raises(QueueError):  # the lifespan shut it down with the app
        await queue.size("orders")
