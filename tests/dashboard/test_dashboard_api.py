"""The dashboard's HTTP API, served for real (hypercorn on a loopback port, asyncio and trio)
over the local backend: counts match the backend, payloads stay hidden without permission,
write actions need the token and pass the CSRF guard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgi_server import serving
from blamequeue import FlowChild, Job, JobContext, JsonlAuditSink, Queue, QueueError
from blamequeue._dashboard import create_dashboard

pytestmark = pytest.mark.anyio

TOKEN = "dashboard-token-0123456789"
ACTION = {"Authorization": f"Bearer {TOKEN}", "X-Blamequeue-Action": "1"}


async def _fail(job: Job, ctx: JobContext) -> None:
    raise RuntimeError(f"broken {job.payload['n']}")


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[Queue]:
    queue = Queue(
        backends={"l": {"protocol": "local", "path": str(tmp_path / "jobs.db")}},
        audit_sinks=[JsonlAuditSink(tmp_path / "audit.jsonl")],
    )
    async with queue:
        await queue.enqueue_many("emails", [{"n": n, "secret": "s3cr3t"} for n in range(3)])
        await queue.enqueue_many("emails", [{"n": 9, "secret": "s3cr3t"}], max_attempts=1)
        await queue.tick("emails", _fail, max=10)  # all four fail; one is dead
        await queue.enqueue_flow(
            "flows",
            [
                FlowChild(name="fetch", payload=1),
                FlowChild(name="parse", payload=2, depends_on=["fetch"]),
            ],
        )
        yield queue


async def test_overview_jobs_and_hidden_payloads(
    seeded: Queue, anyio_backend: str, tmp_path: Path
) -> None:
    audit = str(tmp_path / "audit.jsonl")
    app = create_dashboard(seeded, token=TOKEN, allow_payloads=True, audit_file=audit)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/")
        assert page.status_code == 200
        assert "blamequeue dashboard" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        overview = (await client.get("/api/overview")).json()
        counts = {q["name"]: q for q in overview["queues"]}
        backend = {q.name: q for q in await seeded.queues()}
        assert counts["emails"]["pending"] == backend["emails"].pending == 3
        assert counts["emails"]["dead"] == backend["emails"].dead == 1
        assert len(counts["emails"]["throughput"]) == 60
        assert overview["writable"] is True
        jobs = (await client.get("/api/queues/emails/jobs", params={"state": "dead"})).json()
        [dead] = jobs["jobs"]
        assert dead["job"]["payload"] is None  # never in lists
        job_id = dead["job"]["id"]
        hidden = (await client.get(f"/api/jobs/{job_id}")).json()
        assert hidden["job"]["payload"] is None
        assert hidden["payload_shown"] is False
        shown = (await client.get(f"/api/jobs/{job_id}", headers=ACTION)).json()
        assert shown["job"]["payload"] == {"n": 9, "secret": "s3cr3t"}
        assert "broken 9" in shown["job"]["last_error"]
        what = [entry["what"] for entry in shown["timeline"]]
        assert what[:2] == ["enqueued", "due"]
        assert "system.queue.dlq.write" in what  # from the audit file
        assert what[-1] in ("dead", "system.queue.dlq.write")
        assert (await client.get("/api/jobs/job-nope")).status_code == 404
        flow_id = (await client.get("/api/queues/flows/jobs")).json()["jobs"][0]["job"]["flow_id"]
        flow = (await client.get(f"/api/flows/{flow_id}")).json()
        states = {c["name"]: (c["state"], len(c["depends_on"])) for c in flow["children"]}
        assert states == {"fetch": ("pending", 0), "parse": ("parked", 1)}


async def test_payloads_never_shown_unless_allowed(seeded: Queue, anyio_backend: str) -> None:
    app = create_dashboard(seeded, token=TOKEN)  # allow_payloads off
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        [dead] = (await client.get("/api/queues/emails/dlq")).json()["dead"]
        detail = (await client.get(f"/api/jobs/{dead['job_id']}", headers=ACTION)).json()
        assert detail["job"]["payload"] is None
        assert dead["payload"] is None


async def test_write_actions_need_the_token_and_the_csrf_header(
    seeded: Queue, anyio_backend: str
) -> None:
    read_only = create_dashboard(seeded)
    async with serving(read_only, anyio_backend) as url, httpx.AsyncClient(base_url=url) as c:
        refused = await c.post("/api/queues/emails/dlq/retry-all", headers=ACTION)
        assert refused.status_code == 403
        assert "read-only" in refused.json()["error"]
    app = create_dashboard(seeded, token=TOKEN)
    async with serving(app, anyio_backend) as url, httpx.AsyncClient(base_url=url) as client:
        [dead] = (await client.get("/api/queues/emails/dlq")).json()["dead"]
        retry = f"/api/jobs/{dead['job_id']}/retry"
        cases: list[dict[str, Any]] = [
            {},
            {"Authorization": "Bearer wrong-token-wrong-token"},
            {"Authorization": f"Bearer {TOKEN}"},  # no CSRF header
            {**ACTION, "Origin": "http://evil.example"},
        ]
        for headers in cases:
            assert (await client.post(retry, headers=headers)).status_code == 403
        assert await seeded.dlq_size("emails") == 1  # nothing happened
        assert (await client.post(retry, headers=ACTION)).json() == {"retried": True}
        assert await seeded.dlq_size("emails") == 0
        await seeded.tick("emails", _fail, max=10)
        assert (await client.post("/api/queues/emails/dlq/purge", headers=ACTION)).json()[
            "purged"
        ] >= 1
        assert (await client.delete("/api/overview")).status_code == 405


async def test_a_short_token_is_refused(seeded: Queue) -> None:
    with pytest.raises(QueueError) as caught:
        create_dashboard(seeded, token="short")
    assert caught.value.code == "queue/invalid-config"
