"""Worker crashes: worker processes draining one SQLite file are SIGKILLed, one after another,
and replaced.  Nothing acknowledged is lost, every job runs, and the only jobs that run twice
are jobs a killed worker held when it died (SPEC §3.5, §3.11, §14).

The fault is real: separate processes, ``SIGKILL`` (no cleanup, no atexit, a transaction cut
wherever it was), short leases so the dead worker's jobs come back, and each worker's own sweep
timer that brings them back.  Every handler records its run in a per-process ledger before it
returns; the ledger and the database are compared at the end.
"""

from __future__ import annotations

import collections
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import attrs
from reliability_report import Form, Reports, ScenarioReport

from blamequeue import Queue

WORKER = Path(__file__).with_name("crash_worker.py")
QUEUE = "crash"
TABLE = "blamequeue_jobs"

WORKERS = 3
LEASE = 2.0  # seconds: a killed worker's jobs come back one lease (+ one sweep) later
SWEEP_INTERVAL = 0.5
CONCURRENCY = 2
# Each run takes at least this long, so the fleet finishes at most WORKERS * CONCURRENCY / WORK
# (400) jobs a second: between two kills (KILL_SPACING apart, and at least jobs / (kills + 1)
# completions apart) the backlog cannot run dry, so every kill lands while jobs are running.
WORK = 0.015
KILL_SPACING = 0.5
MAX_ATTEMPTS = 50  # the DLQ is another scenario: here every job must end done
POLL = 0.02


@attrs.define
class Kill:
    """One SIGKILL: when, whom, and the leases held (by anyone) at that instant.

    ``returned_at``: when none of those leases was held any more (the dead worker's came back
    to pending after their lease ran out and a sweep ran): the queue has recovered them.
    ``done_at``: when every one of those jobs was done again.  Re-pended jobs are due at once
    but queue behind the jobs already due, so this one also measures the backlog ahead.
    """

    at: float
    pid: int
    leases: frozenset[tuple[str, str]]
    work_left: int
    returned_at: float | None = None
    done_at: float | None = None

    @property
    def in_flight(self) -> frozenset[str]:
        return frozenset(job_id for job_id, _token in self.leases)


@attrs.define
class Fleet:
    """The worker processes: one slot per worker; a killed worker is replaced in its slot."""

    db: Path
    folder: Path
    slots: list[subprocess.Popen[bytes]] = attrs.field(factory=list)
    everyone: list[subprocess.Popen[bytes]] = attrs.field(factory=list)
    killed: set[int] = attrs.field(factory=set)
    started: int = 0

    def start(self) -> subprocess.Popen[bytes]:
        number = self.started
        self.started += 1
        # Half the workers run on asyncio, half on trio: the fault does not care, neither may we.
        event_loop = "trio" if number % 2 else "asyncio"
        args = [
            sys.executable,
            str(WORKER),
            str(self.db),
            QUEUE,
            str(self.folder / f"ledger-{number}.txt"),
            event_loop,
            str(LEASE),
            str(CONCURRENCY),
            str(WORK),
            str(SWEEP_INTERVAL),
        ]
        # Output goes to a file: a pipe nobody reads would fill up, or leak when killed.
        with (self.folder / f"worker-{number}.log").open("wb") as log:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.everyone.append(process)
        return process

    def kill(self, slot: int) -> int:
        victim = self.slots[slot]
        self.killed.add(victim.pid)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        self.slots[slot] = self.start()
        return victim.pid

    def died_on_their_own(self) -> list[str]:
        return [
            f"worker pid {p.pid} exited with {p.returncode}"
            for p in self.everyone
            if p.poll() is not None and p.pid not in self.killed
        ]

    def stop(self) -> None:
        for process in self.everyone:
            if process.poll() is None:
                process.kill()
        for process in self.everyone:
            process.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.folder.glob("worker-*.log"))
        )


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


def read_ledgers(folder: Path) -> tuple[list[tuple[str, int, int]], int]:
    """Every recorded run, and how many lines were cut short (a kill during the write)."""
    runs: list[tuple[str, int, int]] = []
    torn = 0
    for path in sorted(folder.glob("ledger-*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
                torn += 1
                continue
            runs.append((parts[0], int(parts[1]), int(parts[2])))
    return runs, torn


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

    monitor = sqlite3.connect(db, timeout=30, isolation_level=None)
    fleet = Fleet(db=db, folder=folder)
    kills: list[Kill] = []
    thresholds = [jobs * k // (kills_wanted + 1) for k in range(1, kills_wanted + 1)]

    def done_count() -> int:
        [(count,)] = monitor.execute(
            f"SELECT COUNT(*) FROM {TABLE} WHERE queue = ? AND state = 'done'", (QUEUE,)
        ).fetchall()
        return int(count)

    def states(kill: Kill) -> list[tuple[str, str | None, str]]:
        ids = tuple(kill.in_flight)
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return monitor.execute(
            f"SELECT id, lease_token, state FROM {TABLE} WHERE id IN ({marks})", ids
        ).fetchall()

    started = time.monotonic()
    try:
        fleet.slots = [fleet.start() for _ in range(WORKERS)]
        last_kill = started
        while True:
            now = time.monotonic()
            done = done_count()
            for kill in kills:
                if kill.done_at is not None:
                    continue
                rows = states(kill)
                held = {(i, t) for i, t, state in rows if state == "inflight"} & kill.leases
                if kill.returned_at is None and not held:
                    kill.returned_at = now
                if all(state == "done" for _i, _t, state in rows):
                    kill.done_at = now
            if (
                len(kills) < kills_wanted
                and done >= thresholds[len(kills)]
                and now - last_kill >= KILL_SPACING
            ):
                pid = fleet.kill(len(kills) % WORKERS)
                last_kill = time.monotonic()
                leases = frozenset(
                    (row[0], row[1])
                    for row in monitor.execute(
                        f"SELECT id, lease_token FROM {TABLE} WHERE queue = ? AND state = "
                        f"'inflight'",
                        (QUEUE,),
                    )
                )
                kills.append(
                    Kill(at=last_kill, pid=pid, leases=leases, work_left=jobs - done_count())
                )
            if (
                done == jobs
                and len(kills) == kills_wanted
                and all(k.done_at is not None for k in kills)
            ):
                break
            crashed = fleet.died_on_their_own()
            assert not crashed, f"{crashed}\n{fleet.logs()}"
            assert now - started < hang_guard, (
                f"hang guard: {done}/{jobs} done after {len(kills)} kills\n{fleet.logs()}"
            )
            time.sleep(POLL)
        wall = time.monotonic() - started
    finally:
        fleet.stop()

    try:
        states = dict(
            monitor.execute(
                f"SELECT state, COUNT(*) FROM {TABLE} WHERE queue = ? GROUP BY state", (QUEUE,)
            ).fetchall()
        )
        stored_done = {
            row[0]
            for row in monitor.execute(
                f"SELECT id FROM {TABLE} WHERE queue = ? AND state = 'done'", (QUEUE,)
            )
        }
        [(integrity,)] = monitor.execute("PRAGMA integrity_check").fetchall()
    finally:
        monitor.close()
    size, dead = anyio.run(queue_counts, db)

    runs, torn = read_ledgers(folder)
    per_job = collections.Counter(job_id for job_id, _pid, _attempt in runs)
    ran_twice = {job_id for job_id, count in per_job.items() if count > 1}
    in_flight_at_kills = frozenset().union(*(k.in_flight for k in kills))
    # Who ran each job again: every run but the last must be a killed worker's, of a job it
    # held when it died, and no worker can have held more than CONCURRENCY jobs.
    kill_of = {k.pid: k for k in kills}
    rerun_after: collections.Counter[int] = collections.Counter()
    unexplained: list[str] = []
    by_job: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for job_id, pid, attempt in runs:
        by_job[job_id].append((attempt, pid))
    for job_id in ran_twice:
        for _attempt, pid in sorted(by_job[job_id])[:-1]:
            kill = kill_of.get(pid)
            if kill is None or job_id not in kill.in_flight:
                unexplained.append(f"{job_id} (run by pid {pid})")
            rerun_after[pid] += 1
    lost = enqueued - stored_done
    returns = [k.returned_at - k.at for k in kills if k.returned_at is not None]
    redone = [k.done_at - k.at for k in kills if k.done_at is not None]

    reliability_reports.add(
        ScenarioReport(
            scenario="worker-crashes",
            backend="local",
            form=reliability_form.name,
            enqueued=jobs,
            completed=len(enqueued & stored_done),
            run_more_than_once=len(ran_twice),
            lost=len(lost),
            recovery_seconds=max(returns, default=None),
            details={
                "workers": WORKERS,
                "kills": len(kills),
                "in_flight_at_kills": sum(len(k.in_flight) for k in kills),
                "lease_s": LEASE,
                "mean_recovery_s": sum(returns) / len(returns) if returns else 0.0,
                "max_until_done_again_s": max(redone, default=0.0),
                "torn_ledger_lines": torn,
                "wall_s": wall,
            },
        )
    )

    assert len(kills) == kills_wanted
    assert all(k.work_left > 0 for k in kills), "every kill landed while jobs were left"
    assert not set(per_job) - enqueued, "a handler ran a job nobody enqueued"
    assert not lost, f"{len(lost)} acknowledged jobs lost"
    assert enqueued <= set(per_job), "every job ran at least once"
    assert ran_twice <= in_flight_at_kills, (
        f"{len(ran_twice - in_flight_at_kills)} jobs ran twice without being leased at a kill"
    )
    assert not unexplained, f"runs repeated without a kill to explain them: {unexplained[:10]}"
    assert max(rerun_after.values(), default=0) <= CONCURRENCY
    assert states == {"done": jobs}
    assert (size, dead) == (0, 0)
    assert integrity == "ok"
