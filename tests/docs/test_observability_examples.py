"""docs/prometheus-and-logging.md's examples run as shown: a worker that serves /metrics
(hypercorn's asyncio server) answers a scrape counting the job it ran, and the formatter of
docs/examples/job_log_fields.py prints a failed job's fields."""

from __future__ import annotations

import runpy
import socket
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the example serves with hypercorn's asyncio server


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _processed(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "blamequeue_jobs_processed_total":
                return sample.value
    return 0


@pytest.mark.anyio
async def test_the_worker_serves_its_metrics(tmp_path: Path) -> None:
    module = runpy.run_path(str(EXAMPLES / "metrics_in_worker.py"))
    port, stop = _free_port(), anyio.Event()
    async with anyio.create_task_group() as tg, httpx.AsyncClient() as client:
        tg.start_soon(module["main"], str(tmp_path / "jobs.db"), port, stop)
        with anyio.fail_after(10):
            while True:
                try:
                    answer = await client.get(f"http://127.0.0.1:{port}/metrics")
                except httpx.TransportError:
                    answer = None
                if answer is not None and _processed(answer.text) == 1:
                    break
                await anyio.sleep(0.02)
        stop.set()


@pytest.mark.anyio
async def test_the_log_formatter_shows_a_jobs_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = runpy.run_path(str(EXAMPLES / "job_log_fields.py"))
    await module["main"](str(tmp_path / "jobs.db"))
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("WARNING [job_id=job-")
    assert "queue=emails attempt=1 backend=primary]" in line
    assert line.endswith("ValueError: the mail server said no")
