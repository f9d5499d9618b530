"""Several worker processes on one SQLite file: nothing lost, nothing run twice, and a killed
worker's job comes back after one lease."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blamequeue import Job, JobContext, Queue
from blamequeue_testing import VirtualClock

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("mp_worker.py")


def start_worker(db: Path, queue: str, out: Path, mode: str) -> subprocess.Popen[bytes]:
    # Output goes to a file: a pipe left unread would leak when the worker is killed.
    with out.with_suffix(".log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(db), queue, str(out), mode],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def wait_for(predicate: object, deadline: float, what: str) -> None:
    assert callable(predicate)
    end = time.monotonic() + deadline
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def test_two_worker_processes_drain_10000_jobs_with_none_lost_and_none_twice(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    queue = Queue(backends={"local": {"protocol": "local", "path": str(db)}}, sweep_interval=0)
    async with queue:
        ids: list[str] = []
        for start in range(0, 10_000, 1000):
            ids += await queue.enqueue_many("mp", [{"n": n} for n in range(start, start + 1000)])

    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    workers = [start_worker(db, "mp", out, "drain") for out in outs]
    try:
        for worker, out in zip(workers, outs, strict=True):
            assert worker.wait(timeout=120) == 0, out.with_suffix(".log").read_text()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    ran = [json.loads(out.read_text()) for out in outs]
    everything = ran[0] + ran[1]
    assert len(everything) == 10_000, "a job was run twice or lost"
    assert set(everything) == set(ids)
    assert ran[0], "both workers took part"
    assert ran[1], "both workers took part"


async def test_a_sigkilled_workers_job_is_run_by_another_worker_after_one_lease(
    tmp_path: Path,
) -> None:
    db = tmp_path / "crash.db"
    marker = tmp_path / "started"
    config = {"local": {"protocol": "local", "path": str(db)}}
    async with Queue(backends=config, sweep_interval=0) as producer:
        job_id = await producer.enqueue("crash", {"work": "long"})

    worker = start_worker(db, "crash", marker, "hang")
    try:
        # The file appears before its content: wait for the job id itself.
        wait_for(lambda: marker.exists() and marker.read_text(), 30, "the worker to start the job")
        leased_at = time.time()
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert marker.read_text() == job_id

    # The rescuer's clock says when: before the lease (30 s) runs out the job stays with the
    # dead worker; after it, the sweep gives it to the next worker, on its second attempt.
    clock = VirtualClock(start=leased_at + 25)
    seen: list[Job] = []

    async def handler(job: Job, ctx: JobContext) -> None:
        seen.append(job)

    async with Queue(backends=config, sweep_interval=0, clock=clock) as rescuer:
        early = await rescuer.tick("crash", handler)
        assert early.leased == 0
        clock.advance(10)
        result = await rescuer.tick("crash", handler)
        assert (result.leased, result.succeeded) == (1, 1)
        assert [(job.id, job.attempts) for job in seen] == [(job_id, 2)]
        assert await rescuer.size("crash") == 0
