"""Metrics and health across processes on one SQLite file: a worker process runs jobs (some
fail) and exits; this process, which ran nothing, reads the same figures and error rate."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from blamequeue import HealthThresholds, Queue

pytestmark = pytest.mark.anyio

_WORKER = textwrap.dedent(
    """
    import sys
    import anyio
    from blamequeue import Queue

    async def handler(job, ctx):
        if job.payload % 4 == 0:
            raise ValueError(f"job {job.payload} refused")

    async def main():
        async with Queue(backends={"l": {"protocol": "local", "path": sys.argv[1]}}) as queue:
            await queue.enqueue_many("orders", list(range(12)), max_attempts=1)
            while (await queue.tick("orders", handler, max=5)).leased:
                pass

    anyio.run(main, backend=sys.argv[2])
    """
)


async def test_a_worker_process_figures_are_read_by_another(
    tmp_path: Path, anyio_backend: str
) -> None:
    path = str(tmp_path / "jobs.db")
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-c", _WORKER, path, anyio_backend], check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    async with Queue(backends={"l": {"protocol": "local", "path": path}}) as queue:
        metrics = await queue.metrics("orders", window=300)
        assert (metrics.succeeded, metrics.failed, metrics.dead) == (9, 3, 3)
        assert {e.error.split(":", 1)[0] for e in metrics.recent_errors} == {"ValueError"}
        assert sorted(e.job_id for e in metrics.recent_errors) == sorted(
            {e.job_id for e in metrics.recent_errors}
        )
        report = await queue.health(HealthThresholds(max_error_rate=0.2))
        [orders] = report.queues
        assert orders.error_rate == pytest.approx(0.25)
        assert orders.dead == 3
        assert report.status == "degraded"
