"""Worker crashes on Redis: worker processes draining one queue on a real ``redis-server`` are
SIGKILLed, one after another, and replaced.  Nothing acknowledged is lost, every job runs, and
the only jobs that run twice are jobs a killed worker held when it died (SPEC §3.5, §3.11, §14).

The same scenario as ``test_worker_crashes.py`` (``crash_fleet.py`` drives both): separate
processes on asyncio and trio, ``SIGKILL`` wherever the worker was (in a Lua script's round trip,
in a BLPOP, between a handler's side effect and its settlement), short leases, and the workers'
own sweep timers bringing the dead worker's jobs back.  The store is read beside the workers
(``redis_monitor.py``), never through the queue under test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from crash_fleet import MAX_ATTEMPTS, QUEUE, Fleet, analyse, check, drive
from redis_helpers import config, start_server
from redis_monitor import RedisMonitor
from reliability_report import Form, Reports, ScenarioReport

from blamequeue import Queue
from blamequeue_testing.servers import RedisServer


@pytest.fixture
def server() -> Iterator[RedisServer]:
    started = start_server()
    try:
        yield started
    finally:
        started.cleanup()


async def enqueue_backlog(url: str, jobs: int) -> list[str]:
    ids: list[str] = []
    async with Queue(backends={"redis": config(url)}, sweep_interval=0) as q:
        for start in range(0, jobs, 1000):
            batch = [{"n": n} for n in range(start, min(start + 1000, jobs))]
            ids += await q.enqueue_many(QUEUE, batch, max_attempts=MAX_ATTEMPTS)
    return ids


async def queue_counts(url: str) -> tuple[int, int]:
    async with Queue(backends={"redis": config(url)}, sweep_interval=0) as q:
        return await q.size(QUEUE), await q.dlq_size(QUEUE)


def test_sigkilled_redis_workers_lose_no_job_and_rerun_only_jobs_in_flight_at_a_kill(
    server: RedisServer, tmp_path: Path, reliability_form: Form, reliability_reports: Reports
) -> None:
    jobs = reliability_form.pick(2_000, 20_000)
    kills_wanted = reliability_form.pick(5, 40)
    hang_guard = reliability_form.pick(600.0, 3600.0)  # a hang fails; it is not a speed check
    folder = tmp_path / "workers"
    folder.mkdir()
    ids = anyio.run(enqueue_backlog, server.url, jobs)
    enqueued = set(ids)
    assert len(enqueued) == jobs

    monitor = RedisMonitor(server.url, QUEUE)
    try:
        kills, wall = drive(
            Fleet(backend=json.dumps(config(server.url)), folder=folder),
            monitor,
            jobs=jobs,
            kills_wanted=kills_wanted,
            hang_guard=hang_guard,
        )
        states = monitor.counts()
        stored_done = monitor.ids("done")
    finally:
        monitor.close()
    size, dead = anyio.run(queue_counts, server.url)

    outcome = analyse(folder, kills, enqueued, stored_done)
    reliability_reports.add(
        ScenarioReport(
            scenario="worker-crashes",
            backend="redis",
            form=reliability_form.name,
            enqueued=jobs,
            completed=len(enqueued & stored_done),
            run_more_than_once=len(outcome.ran_twice),
            lost=len(outcome.lost),
            recovery_seconds=outcome.recovery(kills),
            details=outcome.details(kills, wall),
        )
    )

    check(outcome, kills, enqueued, kills_wanted)
    assert states == {"done": jobs}
    assert (size, dead) == (0, 0)
