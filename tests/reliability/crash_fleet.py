"""The worker-crash scenario, whatever the backend (not a test module).

Worker processes (``crash_worker.py``) drain one backlog while the driver SIGKILLs one at each
``1 / (kills + 1)`` of the backlog and starts a replacement.  What the driver needs to know about
the backend (jobs done, leases held) it asks a :class:`Monitor`, which reads the store directly,
beside the queue: the SQLite file for ``local``, the keys for ``redis``.  Every handler records
its run in a per-process ledger; :func:`analyse` compares the ledgers, the kills and what the
store holds at the end.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

import attrs

__all__ = [
    "CONCURRENCY",
    "KILL_SPACING",
    "LEASE",
    "MAX_ATTEMPTS",
    "QUEUE",
    "SWEEP_INTERVAL",
    "WORK",
    "WORKERS",
    "Fleet",
    "Kill",
    "Monitor",
    "Outcome",
    "analyse",
    "check",
    "drive",
    "read_ledgers",
    "read_timed_ledgers",
]

WORKER = Path(__file__).with_name("crash_worker.py")
QUEUE = "crash"

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


class Monitor(Protocol):
    """Reads the backend's store directly, while the workers run."""

    def done_count(self) -> int:
        """Jobs of :data:`QUEUE` that are done."""

    def leases(self) -> frozenset[tuple[str, str]]:
        """Every ``(job id, lease token)`` held right now, read at one instant."""

    def states(self, ids: Collection[str]) -> list[tuple[str, str | None, str]]:
        """``(job id, lease token or None, state)`` of each of ``ids``."""


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
    """The worker processes: one slot per worker; a killed worker is replaced in its slot.

    ``backend`` is what ``crash_worker.py`` takes first: a SQLite path or a backend config as
    JSON.  ``audit``: each worker also writes its audit events to ``audit-<n>.jsonl``.
    """

    backend: str
    folder: Path
    audit: bool = False
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
            self.backend,
            QUEUE,
            str(self.folder / f"ledger-{number}.txt"),
            event_loop,
            str(LEASE),
            str(CONCURRENCY),
            str(WORK),
            str(SWEEP_INTERVAL),
        ]
        if self.audit:
            args.append(str(self.folder / f"audit-{number}.jsonl"))
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


def read_ledgers(folder: Path) -> tuple[list[tuple[str, int, int]], int]:
    """Every recorded run ``(job id, pid, attempt)``, and how many lines were cut short (a
    kill during the write)."""
    runs, torn = read_timed_ledgers(folder)
    return [(job_id, pid, attempt) for job_id, pid, attempt, _at in runs], torn


def read_timed_ledgers(folder: Path) -> tuple[list[tuple[str, int, int, float]], int]:
    """Every recorded run ``(job id, pid, attempt, unix time)``, and the torn lines."""
    runs: list[tuple[str, int, int, float]] = []
    torn = 0
    for path in sorted(folder.glob("ledger-*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 4 or not (parts[1].isdigit() and parts[2].isdigit()):
                torn += 1
                continue
            try:
                at = float(parts[3])
            except ValueError:
                torn += 1
                continue
            runs.append((parts[0], int(parts[1]), int(parts[2]), at))
    return runs, torn


def drive(
    fleet: Fleet, monitor: Monitor, *, jobs: int, kills_wanted: int, hang_guard: float
) -> tuple[list[Kill], float]:
    """Run the fleet over a backlog of ``jobs``, killing one worker ``kills_wanted`` times,
    until every job is done and every killed worker's jobs are done again.  Returns the kills
    and the wall time; the fleet is stopped on the way out."""
    kills: list[Kill] = []
    thresholds = [jobs * k // (kills_wanted + 1) for k in range(1, kills_wanted + 1)]
    started = time.monotonic()
    try:
        fleet.slots = [fleet.start() for _ in range(WORKERS)]
        last_kill = started
        while True:
            now = time.monotonic()
            done = monitor.done_count()
            for kill in kills:
                if kill.done_at is not None:
                    continue
                rows = monitor.states(kill.in_flight)
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
                leases = monitor.leases()
                left = jobs - monitor.done_count()
                kills.append(Kill(at=last_kill, pid=pid, leases=leases, work_left=left))
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
        return kills, time.monotonic() - started
    finally:
        fleet.stop()


@attrs.frozen(kw_only=True)
class Outcome:
    """What the ledgers say against the kills and the store."""

    per_job: collections.Counter[str]
    ran_twice: frozenset[str]
    in_flight_at_kills: frozenset[str]
    unexplained: list[str]
    most_reruns_by_one_worker: int
    lost: frozenset[str]
    torn: int

    def details(self, kills: list[Kill], wall: float) -> dict[str, Any]:
        returns = [k.returned_at - k.at for k in kills if k.returned_at is not None]
        redone = [k.done_at - k.at for k in kills if k.done_at is not None]
        return {
            "workers": WORKERS,
            "kills": len(kills),
            "in_flight_at_kills": sum(len(k.in_flight) for k in kills),
            "lease_s": LEASE,
            "mean_recovery_s": sum(returns) / len(returns) if returns else 0.0,
            "max_until_done_again_s": max(redone, default=0.0),
            "torn_ledger_lines": self.torn,
            "wall_s": wall,
        }

    @staticmethod
    def recovery(kills: list[Kill]) -> float | None:
        return max((k.returned_at - k.at for k in kills if k.returned_at is not None), default=None)


def analyse(folder: Path, kills: list[Kill], enqueued: set[str], stored_done: set[str]) -> Outcome:
    runs, torn = read_ledgers(folder)
    per_job = collections.Counter(job_id for job_id, _pid, _attempt in runs)
    ran_twice = frozenset(job_id for job_id, count in per_job.items() if count > 1)
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
    return Outcome(
        per_job=per_job,
        ran_twice=ran_twice,
        in_flight_at_kills=frozenset().union(*(k.in_flight for k in kills)),
        unexplained=unexplained,
        most_reruns_by_one_worker=max(rerun_after.values(), default=0),
        lost=frozenset(enqueued - stored_done),
        torn=torn,
    )


def check(outcome: Outcome, kills: list[Kill], enqueued: set[str], kills_wanted: int) -> None:
    """The scenario's promises (after its report is filed)."""
    assert len(kills) == kills_wanted
    assert all(k.work_left > 0 for k in kills), "every kill landed while jobs were left"
    assert not set(outcome.per_job) - enqueued, "a handler ran a job nobody enqueued"
    assert not outcome.lost, f"{len(outcome.lost)} acknowledged jobs lost"
    assert enqueued <= set(outcome.per_job), "every job ran at least once"
    assert outcome.ran_twice <= outcome.in_flight_at_kills, (
        f"{len(outcome.ran_twice - outcome.in_flight_at_kills)} jobs ran twice without being "
        f"leased at a kill"
    )
    assert not outcome.unexplained, (
        f"runs repeated without a kill to explain them: {outcome.unexplained[:10]}"
    )
    assert outcome.most_reruns_by_one_worker <= CONCURRENCY
