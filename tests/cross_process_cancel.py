"""The cross-process cancel scenario the local and redis tests share: a handler running in
another worker process is cancelled by ``Queue.cancel`` in this one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from blamequeue import Queue

WORKER = Path(__file__).with_name("cancel_worker.py")
DEADLINE = 30.0
"""Real seconds after which the scenario is declared hung (a safety net, not a timing)."""


def _lines(out: Path) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


async def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    import anyio

    end = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.02)


def _start_worker(
    config: Mapping[str, Any], name: str, out: Path, loop: str
) -> subprocess.Popen[bytes]:
    # Output goes to a file: a pipe left unread would leak when the worker is killed.
    with out.with_suffix(".log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(dict(config)), name, str(out), loop],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def cancel_running_job_in_another_process(
    config: Mapping[str, Any], tmp_path: Path, loop: str
) -> None:
    """Enqueue a job, let a worker process start it, cancel it from here, and see the worker
    cancel the handler at its next heartbeat while the job stays ``cancelled``."""
    out = tmp_path / "worker.out"
    name = f"cancel-{loop}"
    async with Queue(backends={"default": dict(config)}, sweep_interval=0) as queue:
        job_id = await queue.enqueue(name, {"work": "forever"})
        worker = _start_worker(config, name, out, loop)
        try:
            await _wait_for(lambda: f"started {job_id}" in _lines(out), "the worker to start")
            info = await queue.job_info(job_id)
            assert info is not None
            assert info.state == "inflight"
            assert await queue.cancel(job_id) is True
            info = await queue.job_info(job_id)
            assert info is not None
            assert info.state == "cancelled"
            await _wait_for(
                lambda: f"cancelled {job_id}" in _lines(out), "the worker to cancel the handler"
            )
            assert worker.poll() is None  # the worker lives on
            info = await queue.job_info(job_id)
            assert info is not None
            assert info.state == "cancelled"
            assert info.job.attempts == 1
            assert await queue.size(name) == 0
        finally:
            worker.kill()
            worker.wait(timeout=DEADLINE)
