"""Fleet-wide limits across worker processes: the worker (run as a script) and the checks.

usage: fleet_limits.py CONFIG_JSON QUEUE LEDGER GROUP_CONCURRENCY RATE_MAX RATE_PER
  Consume QUEUE with the fleet-wide limits until it is empty; each handler appends
  ``start|end <monotonic time> <group> <job id>`` lines to LEDGER (one file per worker).
  ``time.monotonic`` is one system-wide clock on Linux, so the ledgers of all workers merge
  into one timeline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import anyio

from blamequeue import Job, JobContext, Queue, RateLimit

HANDLER_SECONDS = 0.1


async def drain(
    config: dict[str, object], queue_name: str, ledger: Path, groups: int, rate: RateLimit
) -> None:
    with ledger.open("a", buffering=1) as out:

        async def handler(job: Job, ctx: JobContext) -> None:
            out.write(f"start {time.monotonic():.6f} {job.group_key} {job.id}\n")
            await anyio.sleep(HANDLER_SECONDS)
            # Written before the handler returns, so before the job is settled and its group
            # slot freed: a ledger interval lies inside the job's lease.
            out.write(f"end {time.monotonic():.6f} {job.group_key} {job.id}\n")

        queue = Queue(backends={"fleet": config}, sweep_interval=0)
        async with queue:
            await queue.consume(
                queue_name,
                handler,
                concurrency=4,
                poll_interval=0.05,
                global_rate_limit=rate,
                group_concurrency=groups,
            )
            empty_polls = 0
            while empty_polls < 3:  # size counts inflight: 0 means every job settled
                await anyio.sleep(0.1)
                empty_polls = empty_polls + 1 if await queue.size(queue_name) == 0 else 0


# -- the checks (imported by the tests) -------------------------------------------------------
Event = tuple[float, str, str, str]  # (time, "start" | "end", group, job id)


def read_ledgers(paths: Iterable[Path]) -> list[Event]:
    events: list[Event] = []
    for path in paths:
        for line in path.read_text().splitlines():
            kind, at, group, job_id = line.split(" ")
            events.append((float(at), kind, group, job_id))
    # At equal times an end comes first: a job ends before its slot can be leased again.
    events.sort(key=lambda e: (e[0], e[1] == "start"))
    return events


def peak_in_flight_per_group(events: list[Event]) -> dict[str, int]:
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    for _, kind, group, _ in events:
        running[group] = running.get(group, 0) + (1 if kind == "start" else -1)
        peak[group] = max(peak.get(group, 0), running[group])
    return peak


def most_starts_in_a_window(events: list[Event], window: float) -> int:
    starts = [at for at, kind, _, _ in events if kind == "start"]
    most, first = 0, 0
    for last, at in enumerate(starts):
        while starts[first] <= at - window:
            first += 1
        most = max(most, last - first + 1)
    return most


#: The fleet of :func:`run_fleet`: 3 processes x 4 slots, 4 groups of 25 jobs, at most 2 of a
#: group at once, and 40 starts a second (bursts of 10) for the whole fleet.
WORKERS, GROUPS, JOBS_PER_GROUP, GROUP_CONCURRENCY = 3, 4, 25, 2
RATE = RateLimit(max=10, per_seconds=0.25)


def start_worker(config: dict[str, object], ledger: Path) -> subprocess.Popen[bytes]:
    # Output goes to a file: a pipe left unread would block a chatty worker.
    with ledger.with_suffix(".log").open("wb") as log:
        argv = [sys.executable, __file__, json.dumps(config), "fleet", str(ledger)]
        argv += [str(GROUP_CONCURRENCY), str(RATE.max), str(RATE.per_seconds)]
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


async def run_fleet(config: dict[str, object], tmp_path: Path) -> list[Event]:
    """Enqueue the backlog, let :data:`WORKERS` processes drain it, return their ledger."""
    queue = Queue(backends={"fleet": config}, sweep_interval=0)
    async with queue:
        for group in range(GROUPS):
            await queue.enqueue_many("fleet", list(range(JOBS_PER_GROUP)), group_key=f"g{group}")
    ledgers = [tmp_path / f"worker-{n}.ledger" for n in range(WORKERS)]
    workers = [start_worker(config, ledger) for ledger in ledgers]
    try:
        for worker, ledger in zip(workers, ledgers, strict=True):
            assert worker.wait(timeout=120) == 0, ledger.with_suffix(".log").read_text()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return read_ledgers(ledgers)


def check_fleet(events: list[Event]) -> None:
    """Every job ran once; no group ever had more than its limit in flight; the fleet's
    starts kept to the rate (with slack for the time between a lease and its handler)."""
    starts = [e for e in events if e[1] == "start"]
    assert len(starts) == GROUPS * JOBS_PER_GROUP
    assert len({job_id for *_, job_id in starts}) == len(starts)
    peaks = peak_in_flight_per_group(events)
    assert max(peaks.values()) <= GROUP_CONCURRENCY, peaks
    # Handlers of 0.1 s under 40 starts/s overlap: the limit was reached, not just unneeded.
    assert max(peaks.values()) == GROUP_CONCURRENCY, peaks
    rate = RATE.max / RATE.per_seconds
    # A token bucket lets max + rate x T jobs start in any T seconds; a broken limiter would
    # start the 100 jobs as fast as 12 slots turn over (~1 s).
    elapsed = starts[-1][0] - starts[0][0]
    assert elapsed >= (len(starts) - RATE.max) / rate - 0.25, elapsed
    assert most_starts_in_a_window(events, 1.0) <= RATE.max + rate * 1.0 + RATE.max


def main() -> None:
    config_json, queue_name, ledger, groups, rate_max, rate_per = sys.argv[1:7]
    rate = RateLimit(max=int(rate_max), per_seconds=float(rate_per))
    anyio.run(drain, json.loads(config_json), queue_name, Path(ledger), int(groups), rate)


if __name__ == "__main__":
    main()
