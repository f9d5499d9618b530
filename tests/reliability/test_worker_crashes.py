"""Worker crashes: worker processes draining one SQLite file are SIGKILLed, one after another,
and replaced.  Nothing acknowledged is lost, every job runs, and the only jobs that run twice
are jobs a killed worker held when it died (SPEC §3.5, §3.11, §14).

The fault is real: separate processes, ``SIGKILL`` (no cleanup, no atexit, a transaction cut
wherever it was), short leases so the dead worker's jobs come back, and each worker's own sweep
timer that brings them back.  Every handler records its run in a per-process ledger before it
returns; the ledger and the database are compared at the end (``crash_fleet.py`` drives it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from pathlib import Path

import anyio
from crash_fleet import MAX_ATTEMPTS, QUEUE, Fleet, analyse, check, drive
from reliability_report import Form, Reports, ScenarioReport

from blamequeue import Queue

TABLE = "blamequeue_jobs"


async def enqueue_backlog(db: Path, jobs: int) -> list[str]:
    ids: list[str] = []
    async with Queue(
        backends={"local": {"protocol": "local", "path": str(db)}}, sweep_interval=0
    ) as q:
        for start in range(0, jobs, 1000):
            batch = [{"n": n} for n in range(start, min(start + 1000, jobs))]
            ids += await q.enqueue_many(QUEUE, batch, max_attempts=MAX_ATTEMPTS)
    return ids


async def queue_counts(db: Path) -> tuple[int, int]:
    async with Queue(
        backends={"local": {"protocol": "local", "path": str(db)}}, sweep_interval=0
    ) as q:
        return await q.size(QUEUE), await q.dlq_size(QUEUE)


class SQLiteMonitor:
    """Reads the jobs table beside the workers."""

    def __init__(self, db: Path) -> None:
        self.connection = sqlite3.connect(db, timeout=30, isolation_level=None)

    def done_count(self) -> int:
        [(count,)] = self.connection.execute(
            f"SELECT COUNT(*) FROM {TABLE} WHERE queue = ? AND state = 'done'", (QUEUE,)
        ).fetchall()
        return int(count)

    def leases(self) -> frozenset[tuple[str, str]]:
        return frozenset(
            (row[0], row[1])
            for row in self.connection.execute(
                f"SELECT id, lease_token FROM {TABLE} WHERE queue = ? AND state = 'inflight'",
                (QUEUE,),
            )
        )

    def states(self, ids: Collection[str]) -> list[tuple[str, str | None, str]]:
        chosen = tuple(ids)
        if not chosen:
            return []
        marks = ",".join("?" * len(chosen))
        return self.connection.execute(
            f"SELECT id, lease_token, state FROM {TABLE} WHERE id IN ({marks})", chosen
        ).fetchall()


def test_sigkilled_workers_lose_no_job_and_rerun_only_jobs_in_flight_at_a_kill(
    tmp_path: Path, reliability_form: Form, reliability_reports: Reports
) -> None:
    jobs = reliability_form.pick(2_000, 20_000)
    kills_wanted = reliability_form.pick(5, 40)
    hang_guard = reliability_form.pick(600.0, 3600.0)  # a hang fails; it is not a speed check
    db = tmp_path / "crash.db"
    folder = tmp_path / "workers"
    folder.mkdir()
    ids = anyio.run(enqueue_backlog, db, jobs)
    enqueued = set(ids)
    assert len(enqueued) == jobs

    monitor = SQLiteMonitor(db)
    try:
        kills, wall = drive(
            Fleet(backend=str(db), folder=folder),
            monitor,
            jobs=jobs,
            kills_wanted=kills_wanted,
            hang_guard=hang_guard,
        )
        states = dict(
            monitor.connection.execute(
                f"SELECT state, COUNT(*) FROM {TABLE} WHERE queue = ? GROUP BY state", (QUEUE,)
            ).fetchall()
        )
        stored_done = {
            row[0]
            for row in monitor.connection.execute(
                f"SELECT id FROM {TABLE} WHERE queue = ? AND state = 'done'", (QUEUE,)
            )
        }
        [(integrity,)] = monitor.connection.execute("PRAGMA integrity_check").fetchall()
    finally:
        monitor.connection.close()
    size, dead = anyio.run(queue_counts, db)

    outcome = analyse(folder, kills, enqueued, stored_done)
    reliability_reports.add(
        ScenarioReport(
            scenario="worker-crashes",
            backend="local",
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
    assert integrity == "ok"
